"""Shared plumbing for the single-file scripts in ``cleanrl/``.

Algorithm logic stays in the scripts; this package holds what is not algorithm logic:
replay storage (:mod:`cleanrl_utils.buffers`), run set-up and model files
(:mod:`cleanrl_utils.legacy.run`), evaluation (:mod:`cleanrl_utils.legacy.evals`), and the command-line
tools :mod:`cleanrl_utils.enjoy` (evaluate a saved model), :mod:`cleanrl_utils.benchmark` (the
benchmark launcher) and :mod:`cleanrl_utils.tuner` (Optuna studies).
No module here imports a script.
"""
