"""Shared plumbing for the single-file scripts in ``cleanrl/``.

Algorithm logic stays in the scripts; this package holds what is not algorithm logic:
replay storage (:mod:`cleanrl_utils.buffers`), run set-up and model files
(:mod:`cleanrl_utils.run`) and evaluation (:mod:`cleanrl_utils.evals`).
No module here imports a script.
"""
