"""Speed of apex_dqn_atari.py on Breakout against the bound its learner alone sets, and against dqn_atari.py (ours and
CleanRL's) at the same replay ratio.

1. The learner's bound: the script's learner step (a prioritized batch of 32 from a replay of real Breakout
   transitions, ``td_errors`` with online and target network, backward, gradient clip, the script's fused Adam, the
   priority update, a publication to shared memory every ``--publish-interval`` updates), timed alone on the
   learner's torch threads (the script's default) with nothing else running, at the start of every round (the
   median is the bound; a machine's speed drifts within a session);
   env steps per second = updates per second x batch / replay ratio (32 / 8: 4 env steps per update).
2. Whole runs, alternating in each of ``--rounds`` rounds, each side using both cores its own way: apex_dqn_atari.py
   at its defaults (2 actors x 4 envs stepped in the actors, the learner on its 2 torch threads), ours dqn_atari.py
   with ``--torch-threads 2``, at its defaults and with ``--double-q --dueling`` (the networks and passes of Ape-X's
   learner), and CleanRL's dqn_atari.py (fe8d8a0, from the venv of benchmark/scripts/cleanrl_atari_venv.sh, torch at its
   default threads): each ``--steps`` env steps, learning from ``--learning-starts``, batch 32 every 4 steps,
   replay ``--buffer-size``. Each run's steady rate is read from its TensorBoard events: env steps per second of
   wall time between its first logged step at or after learning-starts + 1,000 and its last (start-up and the
   warm-up excluded); the whole-process wall time is reported too.

    # on an otherwise idle machine:
    python benchmark/scripts/apex_speed.py --rounds 3 --json benchmark/results/parallel/apex_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmark" / "scripts"))

import provenance  # noqa: E402

from cleanrl import apex_dqn_atari  # noqa: E402
from cleanrl_utils.actors import Shared  # noqa: E402
from cleanrl_utils.buffers import PrioritizedReplayBuffer  # noqa: E402
from cleanrl_utils.wrappers import SAME_STEP, real_next_obs  # noqa: E402

ENV_ID, BATCH, RATIO = "BreakoutNoFrameskip-v4", 32, 8.0


def learner_bound(fill: int, updates: int, threads: int) -> dict:
    """Updates per second of the learner alone, on ``threads`` torch threads, on a replay of ``fill`` random-policy
    Breakout steps (8 envs: the script's ``make_env`` in gymnasium's ``SyncVectorEnv``, as an actor's, --env-mode sync)."""
    torch.set_num_threads(threads)
    thunks = [apex_dqn_atari.make_env(ENV_ID, i, False, "") for i in range(8)]
    envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    space, actions_space = envs.single_observation_space, envs.single_action_space
    rb = PrioritizedReplayBuffer(fill // 8 + 16, 8, space, actions_space, n_step=3, frame_stack=4, alpha=0.6, shared=True)
    obs, _ = envs.reset(seed=1)
    rng = np.random.default_rng(1)
    for _ in range(fill // 8):
        actions = rng.integers(actions_space.n, size=8)
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        rb.add(obs, actions, rewards, terminations, truncations, real_next_obs(next_obs, infos))
        obs = next_obs
    envs.close()
    args = apex_dqn_atari.Args()
    q_network = apex_dqn_atari.DuelingQNetwork(space.shape, int(actions_space.n), args.hidden_size)
    target_network = apex_dqn_atari.DuelingQNetwork(space.shape, int(actions_space.n), args.hidden_size)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=args.adam_eps, fused=True)
    shared = Shared(sum(p.numel() for p in q_network.parameters()), 1)

    def update(count: int) -> None:  # the script's learner step, as its loop makes it
        data = rb.sample(BATCH, args.importance_beta)
        versions = rb.versions.reshape(-1)[data.indices.numpy()].copy()
        td_error, q_taken = apex_dqn_atari.td_errors(q_network, target_network, data, args.gamma)
        loss = (data.weights * td_error.square()).mean()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(q_network.parameters(), args.max_grad_norm, foreach=True)
        optimizer.step()
        rb.update_priorities(data.indices, td_error.detach().abs(), versions)
        if count % args.publish_interval == 0:
            shared.publish(q_network)
        loss.item(), q_taken.mean().item()

    for count in range(20):
        update(count)
    start = time.perf_counter()
    for count in range(updates):  # timed as a whole: a publication falls on one update in publish_interval
        update(count)
    per_update = (time.perf_counter() - start) / updates
    return {
        "torch_threads": threads,
        "fill_steps": fill,
        "updates_timed": updates,
        "mean_update_ms": round(1000 * per_update, 2),
        "updates_per_second": round(1 / per_update, 1),
        "bound_env_steps_per_second": round(BATCH / RATIO / per_update, 1),
    }


def steady_rate(run_dir: Path, after: int) -> float:
    """Env steps per second of wall time between the first scalar event at a step >= ``after`` and the last one."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    events = sorted((e.wall_time, e.step) for tag in accumulator.Tags()["scalars"] for e in accumulator.Scalars(tag))
    events = [(t, s) for t, s in events if s >= after]
    (t0, s0), (t1, s1) = events[0], events[-1]
    return (s1 - s0) / (t1 - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8000)
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--buffer-size", type=int, default=20000)
    parser.add_argument(
        "--peer", default=os.environ.get("PEER", "/tmp/crl-atari"), help="benchmark/scripts/cleanrl_atari_venv.sh's venv"
    )
    parser.add_argument("--json", help="write the results here")
    a = parser.parse_args()
    peer = Path(a.peer)
    if not (peer / "cleanrl_peer" / "dqn_atari.py").is_file():
        sys.exit(f"no CleanRL venv at {peer}: run benchmark/scripts/cleanrl_atari_venv.sh {peer} first")
    threads = apex_dqn_atari.Args().torch_threads

    common = ["--env-id", ENV_ID, "--seed", "1", "--total-timesteps", str(a.steps), "--buffer-size", str(a.buffer_size)]
    common += ["--learning-starts", str(a.learning_starts)]
    ours = [sys.executable]
    runs = {
        "apex_dqn_atari": [*ours, str(ROOT / "cleanrl/apex_dqn_atari.py"), *common, "--replay-ratio", str(RATIO)],
        "ours_dqn_atari": [*ours, str(ROOT / "cleanrl/dqn_atari.py"), *common, "--torch-threads", "2"],
        "ours_dqn_atari_double_dueling": [*ours, str(ROOT / "cleanrl/dqn_atari.py"), *common, "--torch-threads", "2"]
        + ["--double-q", "--dueling"],
        "cleanrl_dqn_atari": [str(peer / "bin/python"), str(peer / "cleanrl_peer/dqn_atari.py"), *common],
    }
    environ = {name: value for name, value in os.environ.items() if name not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    environ["PYTHONPATH"] = str(ROOT)
    wall = {name: [] for name in runs}
    steady = {name: [] for name in runs}
    bounds = []
    for _ in range(a.rounds):
        bounds.append(learner_bound(fill=4000, updates=200, threads=threads))  # each round: the machine's speed drifts
        print("learner alone:", bounds[-1], flush=True)
        for name, command in runs.items():
            with tempfile.TemporaryDirectory() as folder:
                start = time.perf_counter()
                result = subprocess.run(command, cwd=folder, env=environ, capture_output=True, text=True)
                seconds = time.perf_counter() - start
                if result.returncode:
                    sys.exit(f"{name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
                (run_dir,) = list((Path(folder) / "runs").iterdir())
                wall[name].append(round(seconds, 2))
                steady[name].append(round(steady_rate(run_dir, a.learning_starts + 1000), 1))
            print(f"{name}: {seconds:.1f} s whole process, steady {steady[name][-1]} steps/s", flush=True)

    medians = {name: statistics.median(values) for name, values in steady.items()}
    bound = {**bounds[0], "bound_env_steps_per_second": statistics.median(b["bound_env_steps_per_second"] for b in bounds)}
    bound["mean_update_ms"] = statistics.median(b["mean_update_ms"] for b in bounds)
    bound["updates_per_second"] = statistics.median(b["updates_per_second"] for b in bounds)
    bound["rounds"] = [b["bound_env_steps_per_second"] for b in bounds]
    report = {
        **provenance.describe(),
        "env_id": ENV_ID,
        "steps": a.steps,
        "learning_starts": a.learning_starts,
        "buffer_size": a.buffer_size,
        "batch_size": BATCH,
        "replay_ratio": RATIO,
        "rounds": a.rounds,
        "cleanrl_commit": (peer / "cleanrl_peer/COMMIT").read_text().strip(),
        "commands": {name: " ".join(Path(c).name if i < 2 else c for i, c in enumerate(cmd)) for name, cmd in runs.items()},
        "learner_alone": bound,
        "wall_seconds": wall,
        "steady_steps_per_second": steady,
        "median_steady_steps_per_second": medians,
        "apex_over_learner_bound": round(medians["apex_dqn_atari"] / bound["bound_env_steps_per_second"], 3),
        "apex_over": {name: round(medians["apex_dqn_atari"] / medians[name], 3) for name in runs if name != "apex_dqn_atari"},
    }
    print(
        json.dumps(
            {k: report[k] for k in ("learner_alone", "median_steady_steps_per_second", "apex_over_learner_bound", "apex_over")}
        )
    )
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
