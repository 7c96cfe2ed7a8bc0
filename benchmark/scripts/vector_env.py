"""Vector-env throughput with random actions: ours against Stable-Baselines3's and bare gymnasium's.

    python benchmark/scripts/vector_env.py --json benchmark/results/speed/vector_env_cartpole_breakout.json

What each side steps, the same games and the same pre-drawn random actions:

- ``ours``: the envs as the scripts build them, ``make_env(..., training=True)`` of ``cleanrl/ppo.py``
  (CartPole) or ``cleanrl/ppo_atari.py`` (Breakout: SB3's Atari wrappers, 84x84 grayscale, 4
  stacked frames): each env with its episode statistics and the replay log checkpoints need,
  vectorised by ``cleanrl_utils.vector.vector_env`` (its ``SyncVectorEnv``, same-step
  autoreset);
- ``sb3``: SB3's ``make_vec_env`` (``Monitor`` per env, ``DummyVecEnv``), for Breakout
  ``make_atari_env`` (``Monitor`` and ``AtariWrapper``) and ``VecFrameStack(4)``;
- ``gymnasium``: gymnasium's ``SyncVectorEnv`` over the bare environments (CartPole) or over
  our Atari preprocessing without statistics and replay log (Breakout): the ceiling.

One process, one torch thread; the sides alternate ``--repeats`` times after a warm-up, each
timing ``--steps`` vector steps; prints environment steps per second (median) and the ratio
ours / SB3 pair by pair.
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


def cartpole(n: int) -> dict:
    from stable_baselines3.common.env_util import make_vec_env

    from cleanrl.ppo import make_env
    from cleanrl_utils.vector import SAME_STEP, vector_env

    return {
        "ours": lambda: vector_env([make_env("CartPole-v1", i, False, "") for i in range(n)], "sync", SAME_STEP),
        "sb3": lambda: make_vec_env("CartPole-v1", n_envs=n, seed=1),
        "gymnasium": lambda: gym.vector.SyncVectorEnv(
            [lambda: gym.make("CartPole-v1") for _ in range(n)], autoreset_mode=SAME_STEP
        ),
    }


def breakout(n: int) -> dict:
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from cleanrl.ppo_atari import make_env
    from cleanrl_utils.vector import SAME_STEP, ReplayableEnv, vector_env

    def bare(i):
        def thunk():
            env = make_env("BreakoutNoFrameskip-v4", i, False, "", training=False)()
            return env.env if isinstance(env, ReplayableEnv) else env

        return thunk

    game = "BreakoutNoFrameskip-v4"
    return {
        "ours": lambda: vector_env([make_env(game, i, False, "") for i in range(n)], "sync", SAME_STEP),
        "sb3": lambda: VecFrameStack(make_atari_env(game, n_envs=n, seed=1), 4),
        "gymnasium": lambda: gym.vector.SyncVectorEnv([bare(i) for i in range(n)], autoreset_mode=SAME_STEP),
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
