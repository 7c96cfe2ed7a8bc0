"""Sampling throughput of three samplers on this machine: sync, async and alternating (rlpyt's), side by side.

What is timed is the sampling half of an on-policy script: the policy choosing actions for ``--num-envs`` envs
and the envs stepping, with ppo_atari.py's Atari preprocessing and its Nature CNN (or ppo.py's MLP on classic
control), one torch thread, no learning. The envs are the scripts' ``make_env(..., training=False)`` (whole games,
no replay log), in gymnasium's own vector envs built as ppo_atari.py builds them for each ``--env-mode``, with
same-step autoreset. The three samplers:

- ``sync``: a ``gym.vector.SyncVectorEnv``: the envs step in this process, then the policy runs; one core.
- ``async``: a ``gym.vector.AsyncVectorEnv`` (one worker process per env, from a forkserver), each step sent
  with ``step_async`` and awaited with ``step_wait(timeout)``; the policy runs while the workers idle, and the
  workers step while the policy idles.
- ``alternating``: the envs in two ``AsyncVectorEnv`` groups (envs 0 .. N/2 - 1 and N/2 .. N - 1, seeded
  ``seed`` and ``seed + N/2``); the policy chooses one group's actions while the other group steps (Stooke &
  Abbeel 2019, arXiv:1909.01500, section 3.1), so that inference and env steps overlap: ppo_atari.py's loop in
  ``--env-mode alternating``. This is the pipeline r2d2_async.py's actors run.

Modes alternate round by round (the machine's load falls on each alike); each round times ``--steps`` vector
steps after ``--warmup``. Steps per second are env steps (``num_envs`` per vector step) over the wall time.

With ``--whole-script``, whole training runs of ppo_atari.py with each ``--env-mode`` (its loop pipelines the two
groups as ``run_alternating`` does) are timed instead, alternating mode by mode in each round, each a fresh
process on one torch thread for ``--total-timesteps``; a run's steady rate is read from its TensorBoard events
(env steps per second of wall time from its first rollout's end to its last: start-up excluded).

    python benchmark/scripts/alternating_sampler.py --env-id BreakoutNoFrameskip-v4 --num-envs 8 --rounds 3
    python benchmark/scripts/alternating_sampler.py --whole-script --total-timesteps 10240 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmark" / "scripts"))

import provenance  # noqa: E402

from cleanrl import ppo, ppo_atari  # noqa: E402
from cleanrl_utils.flags import RunArgs  # noqa: E402
from cleanrl_utils.wrappers import SAME_STEP, TimedSteps  # noqa: E402

TIMEOUT = RunArgs.env_timeout
"""Seconds a worker may take to answer a step: the scripts' default ``--env-timeout``."""


def make_fns(env_id: str, first: int, n: int) -> list:
    """Env thunks ``first .. first + n - 1`` as the training script makes them."""
    if "NoFrameskip" in env_id:
        return [ppo_atari.make_env(env_id, i, False, "", training=False) for i in range(first, first + n)]
    return [ppo.make_env(env_id, i, False, "", training=False) for i in range(first, first + n)]


def make_policy(env_id: str, env: gym.vector.VectorEnv):
    """The training script's agent, sampling actions: ``obs [N, ...] -> actions [N]`` (numpy)."""
    if "NoFrameskip" in env_id:
        agent = ppo_atari.Agent(env).to(memory_format=torch.channels_last)
    else:
        agent = ppo.Agent(env)

    def policy(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            action, _, _, _ = agent.get_action_and_value(torch.as_tensor(obs))
        return action.numpy()

    return policy


def run_single(env_id: str, num_envs: int, mode: str, steps: int, warmup: int) -> float:
    """Env steps per second of ``sync`` or ``async``: the policy, then all envs step (ppo_atari.py's ``envs.step``,
    an async env's workers timed by ``TimedSteps``)."""
    thunks = make_fns(env_id, 0, num_envs)
    if mode == "async":  # one worker process per env, started from a fresh interpreter (forkserver)
        envs = TimedSteps(gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver"), TIMEOUT)
    else:
        envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    try:
        policy = make_policy(env_id, envs)
        obs = envs.reset(seed=1)[0]
        for i in range(warmup + steps):
            if i == warmup:
                start = time.perf_counter()
            obs = envs.step(policy(obs))[0]
        return steps * num_envs / (time.perf_counter() - start)
    finally:
        envs.close()


def run_alternating(env_id: str, num_envs: int, steps: int, warmup: int) -> float:
    """Env steps per second of two async groups of ``num_envs / 2`` stepped as ppo_atari.py's alternating loop
    steps them: at each step, each group in turn receives its last step's results, then its actions are chosen
    and sent while the other group steps; ``steps`` counts steps of all ``num_envs`` (one step of each group)."""
    thunks, h = make_fns(env_id, 0, num_envs), num_envs // 2
    envs_a = gym.vector.AsyncVectorEnv(thunks[:h], autoreset_mode=SAME_STEP, context="forkserver")  # envs 0 .. h-1
    try:
        envs_b = gym.vector.AsyncVectorEnv(thunks[h:], autoreset_mode=SAME_STEP, context="forkserver")  # h .. N-1
    except BaseException:
        envs_a.close()
        raise
    try:
        policy = make_policy(env_id, envs_a)
        next_obs = np.concatenate([envs_a.reset(seed=1)[0], envs_b.reset(seed=1 + h)[0]])
        for step in range(warmup + steps + 1):  # each group's step t is sent at loop step t, received at t + 1
            if step == warmup:
                start = time.perf_counter()
            for group, cols in ((envs_a, slice(0, h)), (envs_b, slice(h, num_envs))):
                if step > 0:
                    next_obs[cols] = group.step_wait(timeout=TIMEOUT)[0]
                if step < warmup + steps:
                    group.step_async(policy(next_obs[cols]))  # overlaps the other group's step
        return steps * num_envs / (time.perf_counter() - start)
    finally:
        envs_a.close()
        envs_b.close()


def run_script(env_id: str, num_envs: int, mode: str, total_timesteps: int) -> float:
    """Steady env steps per second of one training run of ppo_atari.py with ``--env-mode mode``."""
    from apex_speed import steady_rate

    command = [sys.executable, str(ROOT / "cleanrl/ppo_atari.py"), "--env-id", env_id, "--env-mode", mode]
    command += ["--num-envs", str(num_envs)]
    command += ["--total-timesteps", str(total_timesteps), "--seed", "1", "--torch-threads", "1"]
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(command, cwd=folder, check=True, capture_output=True)
        (run_dir,) = list((Path(folder) / "runs").iterdir())
        return steady_rate(run_dir, num_envs * 128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="BreakoutNoFrameskip-v4")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=500, help="timed vector steps per round")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["sync", "async", "alternating"])
    parser.add_argument("--whole-script", action="store_true", help="time whole ppo_atari.py runs instead")
    parser.add_argument("--total-timesteps", type=int, default=10240, help="each whole run's steps")
    parser.add_argument("--json", help="append the results to this JSON file")
    args = parser.parse_args()
    if args.num_envs < 2 or args.num_envs % 2:
        parser.error(f"--num-envs: must be even and at least 2, got {args.num_envs}")
    torch.set_num_threads(1)
    results = {mode: [] for mode in args.modes}
    for r in range(args.rounds):
        for mode in args.modes:
            if args.whole_script:
                sps = run_script(args.env_id, args.num_envs, mode, args.total_timesteps)
            elif mode == "alternating":
                sps = run_alternating(args.env_id, args.num_envs, args.steps, args.warmup)
            else:
                sps = run_single(args.env_id, args.num_envs, mode, args.steps, args.warmup)
            results[mode].append(sps)
            print(f"round {r + 1} {mode:>11}: {sps:8.0f} env steps/s", flush=True)
    sync = statistics.median(results["sync"]) if "sync" in results else None
    for mode, values in results.items():
        ratio = f", {statistics.median(values) / sync:.2f}x sync" if sync else ""
        print(f"{mode:>11}: median {statistics.median(values):8.0f} env steps/s{ratio}")
    if args.json:
        path = Path(args.json)
        data = json.loads(path.read_text()) if path.exists() else {"results": []}
        data = {**data, **provenance.describe()}  # the latest measurement's commit and machine
        if args.whole_script:
            run = {"script": "ppo_atari.py", "total_timesteps": args.total_timesteps, "torch_threads": 1}
        else:
            run = {"steps": args.steps}
        data["results"].append({"env_id": args.env_id, "num_envs": args.num_envs, **run, "sps": results})
        path.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
