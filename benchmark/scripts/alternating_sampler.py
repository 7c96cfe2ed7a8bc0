"""Sampling throughput of three samplers on this machine: sync, async and alternating (rlpyt's), side by side.

What is timed is the sampling half of an on-policy script: the policy choosing actions for ``--num-envs`` envs
and the envs stepping, with ppo_atari.py's Atari preprocessing and its Nature CNN (or ppo.py's MLP on classic
control), one torch thread, no learning. The three samplers:

- ``sync``: the envs step in this process, then the policy runs; one core.
- ``async``: one subprocess per env (cleanrl_utils.vector's async mode); the policy runs while the workers
  idle, and the workers step while the policy idles.
- ``alternating``: the envs in two groups of subprocesses; the policy chooses one group's actions while the
  other group steps (Stooke & Abbeel 2019, arXiv:1909.01500, section 3.1), so that inference and env steps
  overlap. This is the pipeline r2d2_async.py's actors run.

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
from cleanrl_utils.vector import SAME_STEP, vector_env  # noqa: E402


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
    """Env steps per second of ``sync`` or ``async``: the policy, then all envs step."""
    envs = vector_env(make_fns(env_id, 0, num_envs), mode, autoreset_mode=SAME_STEP)
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
    """Env steps per second of two async groups of ``num_envs / 2``: group k's actions are chosen while group
    1 - k steps; ``steps`` counts steps of all ``num_envs`` (two half steps)."""
    half = num_envs // 2
    groups = [vector_env(make_fns(env_id, g * half, half), "async", autoreset_mode=SAME_STEP) for g in (0, 1)]
    try:
        policy = make_policy(env_id, groups[0])
        obs = [g.reset(seed=1 + k * half)[0] for k, g in enumerate(groups)]
        groups[0].step_async(policy(obs[0]))
        k = 1
        for i in range(2 * (warmup + steps)):
            if i == 2 * warmup:
                start = time.perf_counter()
            groups[k].step_async(policy(obs[k]))  # overlaps group 1 - k's step
            k = 1 - k
            obs[k] = groups[k].step_wait()[0]
        groups[1 - k].step_wait()
        return steps * num_envs / (time.perf_counter() - start)
    finally:
        for g in groups:
            g.close()


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
