"""Vector-env throughput with random actions: what the scripts step against Stable-Baselines3's and bare gymnasium's.

    python benchmark/scripts/vector_env.py --json benchmark/results/speed/vector_env_cartpole_breakout.json

What each side steps, the same games and the same pre-drawn random actions:

- ``ours``: the envs as the scripts build them with ``--env-mode sync``: gymnasium's ``SyncVectorEnv``
  (same-step autoreset) over ``make_env(..., training=True)`` of ``cleanrl/ppo.py`` (CartPole) or
  ``cleanrl/ppo_atari.py`` (Breakout: SB3's Atari wrappers with episodic life and sign-clipped rewards, 84x84
  grayscale, 4 stacked frames), each env with the scripts' per-env wrappers: ``RecordEpisodeStatistics``,
  ``CheckedEnv`` (output checks) and ``ReplayableEnv`` (the replay log checkpoints need);
- ``sb3``: SB3's ``make_vec_env`` (``Monitor`` per env, ``DummyVecEnv``), for Breakout
  ``make_atari_env`` (``Monitor`` and ``AtariWrapper``, also with episodic life and clipped rewards) and
  ``VecFrameStack(4)``;
- ``gymnasium``: the same ``SyncVectorEnv`` over the same envs with those three per-env wrappers taken out
  (CartPole bare; Breakout with only the Atari preprocessing): the ceiling, and what the wrappers cost.

One process, one torch thread; the sides alternate ``--repeats`` times after a warm-up (a quarter of a round), each
round timing 2,000 vector steps of 4 CartPole envs or 150 of 8 Breakout envs; prints environment steps per second
(median) and the ratio ours / SB3 pair by pair.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import provenance

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv, ReplayableEnv  # noqa: E402

SCRIPT_WRAPPERS = (gym.wrappers.RecordEpisodeStatistics, CheckedEnv, ReplayableEnv)
"""The per-env wrappers every script's ``make_env`` adds (``ReplayableEnv`` in training)."""


def without_script_wrappers(thunk):
    """A thunk of ``thunk``'s env with the scripts' per-env wrappers taken out of its stack, and
    ``ReplayableEnv``'s observer of real resets taken off its base env: the env gymnasium would step bare."""

    def make():
        env = thunk()
        vars(env.unwrapped).pop("reset", None)  # ReplayableEnv set reset on the base env's instance
        while isinstance(env, SCRIPT_WRAPPERS):
            env = env.env
        outer = env
        while isinstance(outer, gym.Wrapper):
            if isinstance(outer.env, SCRIPT_WRAPPERS):
                outer.env = outer.env.env
            else:
                outer = outer.env
        return env

    return make


def sync_vector_env(thunks: list) -> gym.vector.SyncVectorEnv:
    """``thunks`` vectorised as the scripts do with ``--env-mode sync``."""
    return gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)


def cartpole(n: int) -> dict:
    from stable_baselines3.common.env_util import make_vec_env

    from cleanrl.ppo import make_env

    return {
        "ours": lambda: sync_vector_env([make_env("CartPole-v1", i, False, "") for i in range(n)]),
        "sb3": lambda: make_vec_env("CartPole-v1", n_envs=n, seed=1),
        "gymnasium": lambda: sync_vector_env(
            [without_script_wrappers(make_env("CartPole-v1", i, False, "")) for i in range(n)]
        ),
    }


def breakout(n: int) -> dict:
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from cleanrl.ppo_atari import make_env

    game = "BreakoutNoFrameskip-v4"
    return {
        "ours": lambda: sync_vector_env([make_env(game, i, False, "") for i in range(n)]),
        "sb3": lambda: VecFrameStack(make_atari_env(game, n_envs=n, seed=1), 4),
        "gymnasium": lambda: sync_vector_env([without_script_wrappers(make_env(game, i, False, "")) for i in range(n)]),
    }


def steps_per_second(envs, actions: np.ndarray, sb3: bool) -> float:
    """Environment steps per second of ``envs`` stepped through ``actions`` ``[steps, n]``."""
    if sb3:
        envs.reset()
    else:
        envs.reset(seed=1)
    start = time.perf_counter()
    for action in actions:
        envs.step(action)
    return actions.size / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=["cartpole", "breakout"], choices=["cartpole", "breakout"])
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds of each side (default 15)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    import ale_py

    gym.register_envs(ale_py)
    setups = {"cartpole": (cartpole, 4, 2000, 2), "breakout": (breakout, 8, 150, 4)}  # builder, envs, steps, actions
    results = {}
    for case in args.cases:
        build, n, steps, num_actions = setups[case]
        actions = np.random.default_rng(0).integers(0, num_actions, (steps, n))
        envs = {name: make() for name, make in build(n).items()}
        for name, vec in envs.items():  # warm-up
            steps_per_second(vec, actions[: steps // 4], name == "sb3")
        timings = {name: [] for name in envs}
        for _ in range(args.repeats):
            for name, vec in envs.items():
                timings[name].append(steps_per_second(vec, actions, name == "sb3"))
        for vec in envs.values():
            vec.close()
        ratios = [ours / sb3 for ours, sb3 in zip(timings["ours"], timings["sb3"])]
        results[case] = {
            "num_envs": n,
            "steps_per_round": steps * n,
            "steps_per_second": {name: statistics.median(values) for name, values in timings.items()},
            "all": timings,
            "ratio_ours_sb3_pairwise": ratios,
            "ratio_ours_sb3_median": statistics.median(ratios),
        }
        medians = results[case]["steps_per_second"]
        print(
            f"{case} x{n}: ours {medians['ours']:,.0f}, SB3 {medians['sb3']:,.0f}, gymnasium {medians['gymnasium']:,.0f} "
            f"steps/s; ours/SB3 pair by pair {', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})"
        )
    if args.json:
        args.json.write_text(json.dumps({"meta": provenance.describe(), "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
