"""Summarise learning runs of one environment: the curve of episodic returns, against a random policy.

Reads ``charts/episodic_return`` from the TensorBoard events of each run directory (on Atari
the game scores, unclipped, all lives), bins it by environment steps, and measures a uniformly
random policy on the same environment: on Atari through the same preprocessing
(dqn_atari.py's ``make_env``), elsewhere the plain ``gym.make`` env with episode statistics and
``CheckedEnv``'s output checks (uniform actions within a Box's bounds); one env in gymnasium's
``SyncVectorEnv`` (same-step autoreset), as the scripts evaluate.

    python benchmark/scripts/curve.py runs/BreakoutNoFrameskip-v4__dqn_atari__1__* \\
        --random-games 30 --json benchmark/results/atari/breakout_120k_dqn_c51_rainbow.json \\
        --plot benchmark/results/atari/breakout_120k_dqn_c51_rainbow.png
    python benchmark/scripts/curve.py runs/Hopper-v5__* --bin 25000 \\
        --json benchmark/results/mujoco/hopper_60k_ddpg_td3_sac.json

Each run's line: steps trained, wall-clock minutes from the first to the last event, the mean
return of the last 20 and of the last 100 episodes (the window of CleanRL's published tables,
its docs/contribution.md), and the mean return per bin of ``--bin`` steps.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import provenance

ROOT = Path(__file__).resolve().parents[2]


def read_run(directory: Path) -> dict:
    """Episodic returns of one run: {'script', 'seed', 'steps', 'returns', 'minutes'}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    accumulator.Reload()
    events = accumulator.Scalars("charts/episodic_return")
    everything = [e for tag in accumulator.Tags()["scalars"] for e in accumulator.Scalars(tag)]
    config = json.loads((directory / "args.json").read_text())
    return dict(
        script=config["exp_name"],
        seed=config["seed"],
        env_id=config["env_id"],
        total_timesteps=config["total_timesteps"],
        steps=[e.step for e in events],
        returns=[e.value for e in events],
        minutes=(max(e.wall_time for e in everything) - min(e.wall_time for e in everything)) / 60,
    )


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id


def random_policy_returns(env_id: str, games: int, seed: int) -> list[float]:
    """Episodic returns of uniformly random actions (all actions, masked or not): on Atari full games through
    dqn_atari.py's preprocessing, on MiniGrid through ppo_structured.py's ``make_env``."""
    import gymnasium as gym

    from cleanrl_utils import dmc
    from cleanrl_utils.evals import run_episodes
    from cleanrl_utils.wrappers import SAME_STEP, CheckedEnv

    dmc.register(env_id)  # dm_control/... ids: registered by Shimmy (the dm_control extra)
    if is_atari(env_id):
        from cleanrl.dqn_atari import make_env

        thunk = make_env(env_id, 0, False, "", training=False)
    elif env_id.startswith("MiniGrid-"):
        from cleanrl.ppo_structured import make_env  # registers MiniGrid's ids, leaves out the text mission

        thunk = make_env(env_id, 0, False, "", training=False)
    else:
        thunk = lambda: CheckedEnv(gym.wrappers.RecordEpisodeStatistics(gym.make(env_id)))  # noqa: E731
    envs = gym.vector.SyncVectorEnv([thunk], autoreset_mode=SAME_STEP)  # one env, as the scripts' evaluation
    rng = np.random.default_rng(seed)
    space = envs.single_action_space
    n = envs.num_envs
    if isinstance(space, gym.spaces.Discrete):
        policy = lambda obs: rng.integers(space.n, size=n)  # noqa: E731
    elif isinstance(space, gym.spaces.MultiDiscrete):
        policy = lambda obs: rng.integers(space.nvec, size=(n, *space.shape))  # noqa: E731
    else:
        policy = lambda obs: rng.uniform(space.low, space.high, (n, *space.shape))  # noqa: E731
    returns = run_episodes(envs, policy, games, seed=seed)
    envs.close()
    return [float(r) for r in returns]


def binned(steps: list[int], returns: list[float], width: int, total: int) -> list[float | None]:
    """Mean return of the games that ended in each bin [k width, (k+1) width)."""
    steps_a, returns_a = np.asarray(steps), np.asarray(returns)
    out = []
    for start in range(0, total, width):
        inside = (steps_a >= start) & (steps_a < start + width)
        out.append(float(returns_a[inside].mean()) if inside.any() else None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories")
    parser.add_argument("--bin", type=int, default=10_000, help="bin width in environment steps")
    parser.add_argument("--random-games", type=int, default=30, help="games of the random policy (0: skip)")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--plot", type=Path, help="write a PNG of the curves here (needs matplotlib)")
    args = parser.parse_args()

    runs = [read_run(directory) for directory in args.runs]
    total = max(run["total_timesteps"] for run in runs)
    summary = dict(bin=args.bin, runs=[])
    for directory, run in zip(args.runs, runs):
        curve = binned(run["steps"], run["returns"], args.bin, total)
        last20, last100 = float(np.mean(run["returns"][-20:])), float(np.mean(run["returns"][-100:]))
        summary["runs"].append(
            dict(
                run=directory.name,
                script=run["script"],
                seed=run["seed"],
                steps=run["total_timesteps"],
                games=len(run["returns"]),
                minutes=round(run["minutes"], 1),
                last20=round(last20, 2),
                last100=round(last100, 2),
                curve=[None if v is None else round(v, 2) for v in curve],
            )
        )
        shown = " ".join("-" if v is None else f"{v:.1f}" for v in curve)
        print(
            f"{run['script']} seed {run['seed']}: {run['total_timesteps']} steps, {len(run['returns'])} episodes, "
            f"{run['minutes']:.0f} min, last 20 episodes {last20:.1f}, last 100 {last100:.1f}; per {args.bin} steps: {shown}"
        )
    if args.random_games:
        env_id = runs[0]["env_id"]
        returns = random_policy_returns(env_id, args.random_games, seed=0)
        summary["random"] = dict(
            env_id=env_id, games=len(returns), mean=round(float(np.mean(returns)), 2), std=round(float(np.std(returns)), 2)
        )
        print(f"random policy on {env_id}: {np.mean(returns):.2f} ± {np.std(returns):.2f} over {len(returns)} episodes")
    if args.json:
        commit = provenance.commit()
        summary["meta"] = dict(commit_of_summary=commit, time=time.strftime("%Y-%m-%dT%H:%M:%S"))
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for run in runs:
            steps, returns = np.asarray(run["steps"]), np.asarray(run["returns"])
            window = 20
            if len(returns) >= window:
                smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
                ax.plot(steps[window - 1 :], smooth, label=f"{run['script']} (seed {run['seed']})")
        if "random" in summary:
            ax.axhline(summary["random"]["mean"], color="gray", linestyle="--", label="random policy")
        atari = is_atari(runs[0]["env_id"])
        ax.set_xlabel("environment steps (agent steps; 4 frames each)" if atari else "environment steps")
        ax.set_ylabel(f"{'game score' if atari else 'episodic return'}, mean of the last 20 episodes")
        ax.set_title(runs[0]["env_id"])
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)


if __name__ == "__main__":
    main()
