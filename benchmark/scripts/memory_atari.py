"""Peak resident memory of DQN on Atari with a filled replay buffer: dqn_atari.py's set-up against
stable-baselines3's DQN with its memory-optimised buffer.

Each side runs in a fresh process that builds exactly what its training run holds: the
preprocessed Breakout env, the online and target Nature CNNs with Adam, and the replay buffer at
the requested capacity (ours: ``ReplayBuffer(..., frame_stack=4)`` as dqn_atari.py builds it, each
84x84 frame stored once; SB3: ``DQN("CnnPolicy", optimize_memory_usage=True)``, which stores each
4-frame stack once). It then fills the buffer with ``--fill`` transitions of real frames (a
few thousand env steps of random play, cycled: the memory touched is the same as for new frames,
and stepping the game a million times would take an hour here), runs 100 gradient steps, and
reports the process's peak resident set size (``ru_maxrss``).

    python benchmark/scripts/memory_atari.py --capacity 100000 --fill 100000      # both sides
    python benchmark/scripts/memory_atari.py --capacity 1000000 --fill 1000000 --side ours

SB3's buffer at 1M transitions needs 1M x 4 x 84 x 84 bytes = 28.2 GB for the observations alone,
more than this 24 GiB machine has; it is measured at a partial fill.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import provenance

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # ru_maxrss is in KiB on Linux


def real_frames(env_id: str, steps: int, seed: int):
    """``steps`` transitions of random play through dqn_atari.py's preprocessing: stacked frames and flags."""
    from cleanrl.dqn_atari import make_env

    env = make_env(env_id, 0, False, "")()
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for _ in range(steps):
        action = int(rng.integers(env.action_space.n))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        out.append((obs, action, reward, terminated, truncated, next_obs))
        obs = env.reset()[0] if terminated or truncated else next_obs
    env.close()
    return env.observation_space, env.action_space, out


def measure_ours(env_id: str, capacity: int, fill: int, frames: int, seed: int) -> dict:
    import torch

    from cleanrl.dqn_atari import QNetwork
    from cleanrl_utils.buffers import ReplayBuffer

    torch.set_num_threads(1)
    observation_space, action_space, data = real_frames(env_id, frames, seed)
    rb = ReplayBuffer(capacity, 1, observation_space, action_space, n_step=1, frame_stack=4, seed=seed)
    q = QNetwork(action_space.n).to(memory_format=torch.channels_last)  # as dqn_atari.py trains them
    target = QNetwork(action_space.n).to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(q.parameters(), lr=1e-4, fused=True)
    start = time.perf_counter()
    for i in range(fill):
        obs, action, reward, terminated, truncated, next_obs = data[i % len(data)]
        rb.add(
            obs[None], np.array([action]), np.array([reward]), np.array([terminated]), np.array([truncated]), next_obs[None]
        )
    fill_seconds = time.perf_counter() - start
    for _ in range(100):
        batch = rb.sample(32)
        with torch.no_grad():
            y = batch.rewards[:, 0] + 0.99 * (1 - batch.terminations[:, 0]) * target(batch.next_obs).max(1).values
        loss = torch.nn.functional.mse_loss(q(batch.obs).gather(1, batch.actions[:, None]).squeeze(1), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return dict(side="ours", stored=len(rb), fill_seconds=round(fill_seconds, 1), peak_rss_gib=round(peak_rss_gib(), 3))


def measure_sb3(env_id: str, capacity: int, fill: int, frames: int, seed: int) -> dict:
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    import cleanrl.dqn_atari  # noqa: F401  (registers the ALE games with gymnasium)

    torch.set_num_threads(1)
    env = VecFrameStack(make_atari_env(env_id, n_envs=1, seed=seed), n_stack=4)
    model = DQN(
        "CnnPolicy",
        env,
        buffer_size=capacity,
        batch_size=32,
        learning_starts=0,
        optimize_memory_usage=True,
        replay_buffer_kwargs=dict(handle_timeout_termination=False),
        device="cpu",
        verbose=0,
    )
    _, _, data = real_frames(env_id, frames, seed)
    rb = model.replay_buffer
    start = time.perf_counter()
    for i in range(fill):  # the model transposes images: SB3 stores stacks [1, 4, 84, 84]
        obs, action, reward, terminated, truncated, next_obs = data[i % len(data)]
        rb.add(obs[None], next_obs[None], np.array([[action]]), np.array([reward]), np.array([terminated or truncated]), [{}])
    fill_seconds = time.perf_counter() - start
    from stable_baselines3.common.logger import configure

    model.set_logger(configure(None, []))
    model.train(gradient_steps=100, batch_size=32)
    return dict(
        side="sb3",
        stored=rb.size(),
        fill_seconds=round(fill_seconds, 1),
        peak_rss_gib=round(peak_rss_gib(), 3),
        observation_array_gib=round(rb.observations.nbytes / GIB, 2),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", choices=["ours", "sb3", "both"], default="both")
    parser.add_argument("--env-id", default="BreakoutNoFrameskip-v4")
    parser.add_argument("--capacity", type=int, default=1_000_000, help="replay capacity in transitions")
    parser.add_argument("--fill", type=int, nargs="+", default=[100_000], help="transitions added before measuring")
    parser.add_argument("--frames", type=int, default=5000, help="env steps of real frames, cycled")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="append the results to this JSON list")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:  # one measurement in this fresh process
        measure = measure_ours if args.side == "ours" else measure_sb3
        result = measure(args.env_id, args.capacity, args.fill[0], args.frames, args.seed)
        print(json.dumps(result))
        return
    sides = ["ours", "sb3"] if args.side == "both" else [args.side]
    commit = provenance.commit()
    results = json.loads(args.json.read_text()) if args.json and args.json.exists() else []
    for fill in args.fill:
        for side in sides:
            command = [
                sys.executable,
                __file__,
                "--child",
                "--side",
                side,
                "--env-id",
                args.env_id,
                "--capacity",
                str(args.capacity),
                "--fill",
                str(fill),
                "--frames",
                str(args.frames),
                "--seed",
                str(args.seed),
            ]
            out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            if out.returncode:  # recorded: SB3's 1M buffer cannot be allocated on a 24 GiB machine
                error = out.stderr.strip().splitlines()[-1]
                print(f"{side} at fill {fill}: failed with exit status {out.returncode}: {error}")
                result = dict(side=side, error=error)
            else:
                result = json.loads(out.stdout.strip().splitlines()[-1])
            result.update(capacity=args.capacity, fill=fill, commit=commit, time=time.strftime("%Y-%m-%dT%H:%M:%S"))
            print(json.dumps(result), flush=True)
            results.append(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
