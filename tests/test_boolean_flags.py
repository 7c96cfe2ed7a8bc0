"""CleanRL's spelling of a boolean flag, ``--flag True`` / ``--flag False`` (issue 48, item 11).

CleanRL's argparse scripts and older docs write ``--capture-video True``, ``--autotune False``, ``--track True``; tyro
reads booleans as ``--flag`` / ``--no-flag`` and refused them with "Unrecognized options: False". Every script reads
its flags with ``cleanrl_utils.flags.parse_args``, which now puts CleanRL's spelling in tyro's.
"""

from __future__ import annotations

import importlib

import pytest

from cleanrl_utils.flags import parse_args
from tests.conftest import assert_stops_with_one_line


def parsed(script: str, argv: list[str]):
    """The checked ``Args`` of ``cleanrl/<script>.py`` for the command line ``argv``."""
    module = importlib.import_module(f"cleanrl.{script}")
    args, resumed = parse_args(module.Args, module.__file__, module.check_args, argv=argv)
    assert resumed is None
    return args


@pytest.mark.parametrize(
    "script, argv, expected",
    [
        # defaults True: --autotune, --norm-adv, --torch-deterministic, --cuda; defaults False: --capture-video, --track
        ("sac_continuous", ["--autotune", "False", "--capture-video", "True"], dict(autotune=False, capture_video=True)),
        ("sac_continuous", ["--autotune", "True", "--capture-video", "False"], dict(autotune=True, capture_video=False)),
        ("ppo", ["--norm-adv", "false", "--track", "TRUE", "--cuda=False"], dict(norm_adv=False, track=True, cuda=False)),
        (
            "ppo",
            ["--torch_deterministic", "False", "--capture_video=true"],
            dict(torch_deterministic=False, capture_video=True),
        ),
        ("dqn", ["--double-q", "True", "--torch-deterministic", "True"], dict(double_q=True, torch_deterministic=True)),
        ("dqn", ["--dueling=True", "--cuda", "False", "--save-model"], dict(dueling=True, cuda=False, save_model=True)),
    ],
)
def test_cleanrls_flag_true_and_flag_false_set_a_boolean(script, argv, expected):
    args = parsed(script, argv)
    assert {name: getattr(args, name) for name in expected} == expected


def test_tyros_spelling_and_a_text_flag_whose_value_is_true_are_unchanged():
    args = parsed("ppo", ["--exp-name", "True", "--wandb-project-name", "False", "--track", "--no-anneal-lr"])
    assert (args.exp_name, args.wandb_project_name, args.track, args.anneal_lr) == ("True", "False", True, False)


@pytest.mark.parametrize("flags, extra", [(["--capture-video", "yes"], "yes"), (["--track", "True", "True"], "True")])
@pytest.mark.parametrize("script", ["ppo.py", "sac_continuous.py"])
def test_another_value_after_a_boolean_flag_is_still_one_line(script, flags, extra, tmp_path):
    """Only true and false are read as CleanRL's spelling, and once per flag: anything else is tyro's one line."""
    assert_stops_with_one_line(script, flags, "arguments", f"Unrecognized options: {extra}", tmp_path)
