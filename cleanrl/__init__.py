"""Single-file deep RL scripts. Each file runs on its own: ``python cleanrl/<script>.py --help``.

The package marker only lets tests import a script's pure functions
(``from cleanrl.ppo import compute_gae``); scripts never import each other.
"""
