"""A cost model of impala_atari.py on Breakout: per-component times measured here, throughput predicted elsewhere.

Measured on this machine, each on one core (one torch thread), per env step:

- ``env``: the script's Breakout envs (8, its ``make_env`` in gymnasium's ``SyncVectorEnv`` as an actor's
  with ``--env-mode sync``: stepped in one process, random actions);
- ``inference``: the Nature CNN choosing actions for 8 envs (sampling from π), in an actor;
- ``transfer``: an actor writing a step of 8 observations (and the other fields) into its shared-memory slot,
  and the learner copying a batch of slots out (index, transpose to time first);
- ``update``: one learner step on 32 trajectories of 20 steps (forward over 21 x 32 frames, V-trace, the
  losses, backward, RMSProp), divided by the 640 steps it learns from; with 1 and with 2 torch threads.

The model: actors and the learner run at once and share the ``C`` cores, so with a learner of ``k`` threads the
throughput is ``min(C / (env + inference + transfer + k * update_k), 1 / update_k)`` env steps per second (all
cores busy, or the learner the bound), best over ``k``. ``update_k`` for ``k`` > 2 is extrapolated by Amdahl's
law from the measured speed-up from 1 to 2 threads.
With one GPU doing the update, the learner's bound is the GPU's, which is not measured here (no GPU): the
prediction is then the actors' bound, ``C / (env + inference + transfer)`` with every core an actor core, and
holds as long as the GPU's update per step is shorter than its reciprocal. All of these are predictions, except
at 2 cores, where the model is checked against the measured ``charts/SPS``.

    python benchmark/scripts/cost_model.py --repeats 5 --json benchmark/results/parallel/impala_cost_model.json
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
import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmark" / "scripts"))

import provenance  # noqa: E402

from cleanrl import impala_atari  # noqa: E402
from cleanrl_utils.wrappers import SAME_STEP  # noqa: E402

ENV_ID, E, T, B = "BreakoutNoFrameskip-v4", 8, 20, 32


def seconds(fn, n: int, warmup: int = 3) -> float:
    """Median over ``n`` calls of ``fn``'s wall time, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(repeats: int) -> dict[str, float]:
    """Seconds per env step of each component (one core), and of the update with 2 threads."""
    torch.set_num_threads(1)
    thunks = [impala_atari.make_env(ENV_ID, i, False, "") for i in range(E)]
    envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)  # an actor's envs, --env-mode sync
    obs = torch.as_tensor(envs.reset(seed=1)[0])
    n = int(envs.single_action_space.n)
    rng = np.random.default_rng(1)
    env = seconds(lambda: envs.step(rng.integers(n, size=E)), 50 * repeats) / E
    agent = impala_atari.Agent(envs.single_observation_space.shape, n)
    envs.close()

    def act():
        with torch.no_grad():
            logits, _ = agent(obs)
            torch.distributions.Categorical(logits=logits).sample()

    inference = seconds(act, 50 * repeats) / E
    slots = torch.zeros((2 * B // E, T + 1, E, 4, 84, 84), dtype=torch.uint8).share_memory_()
    fields = torch.zeros((2 * B // E, T, E)).share_memory_()
    index = torch.arange(B // E)
    write = seconds(lambda: (slots[0, 3].copy_(obs), fields[0, 3].copy_(torch.ones(E))), 200 * repeats) / E
    read = seconds(lambda: slots[index].transpose(0, 1).flatten(1, 2).contiguous(), 5 * repeats) / (B * T)

    optimizer = torch.optim.RMSprop(agent.parameters(), lr=6e-4, alpha=0.99, eps=0.01)
    frames = torch.randint(0, 256, (T + 1, B, 4, 84, 84), dtype=torch.uint8)
    actions, behaviour = torch.randint(0, n, (T, B)), torch.full((T, B), -np.log(n))
    rewards, dones = torch.zeros(T, B), torch.zeros(T, B, dtype=torch.bool)

    def update():
        logits, values = agent(frames.flatten(0, 1))
        logits, values = logits.view(T + 1, B, n), values.view(T + 1, B)
        dist = torch.distributions.Categorical(logits=logits[:T])
        logp = dist.log_prob(actions)
        vs, advantages, _ = impala_atari.vtrace(
            behaviour, logp, rewards, values[:T].detach(), rewards, values[T].detach(), dones, 0.99
        )
        loss = -(logp * advantages).sum() + 0.25 * (vs - values[:T]).square().sum() - 0.01 * dist.entropy().sum()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), 40.0)
        optimizer.step()

    update_1 = seconds(update, repeats, warmup=2) / (B * T)
    torch.set_num_threads(2)
    update_2 = seconds(update, repeats, warmup=2) / (B * T)
    torch.set_num_threads(1)
    return dict(env=env, inference=inference, transfer=write + read, update_1=update_1, update_2=update_2)


def predict(times: dict[str, float], cores: int) -> dict[str, float]:
    """Env steps per second on ``cores`` CPU cores, best over the learner's thread count ``k``, and the actors'
    bound with the update on a GPU.

    A learner of ``k`` threads takes ``update_k`` seconds per env step and ``k * update_k`` of CPU; with the actors'
    ``env + inference + transfer`` the work per step is spread over all cores, so the throughput is
    ``min(cores / (actor + k * update_k), 1 / update_k)``.
    """
    actor = times["env"] + times["inference"] + times["transfer"]
    speedup_2 = times["update_1"] / times["update_2"]
    serial = max(0.0, min(1.0, 2.0 / speedup_2 - 1.0))  # Amdahl: speed-up(2) = 1 / (s + (1 - s) / 2)
    best = 0.0
    for k in range(1, cores + 1):
        update_k = times["update_1"] * (serial + (1.0 - serial) / k)
        best = max(best, min(cores / (actor + k * update_k), 1.0 / update_k))
    return {"cpu_only": best, "gpu_learner_actor_bound": cores / actor, "learner_serial_fraction": serial}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cores", type=int, nargs="+", default=[2, 8, 32, 64])
    parser.add_argument("--json", help="write the times and predictions to this JSON file")
    args = parser.parse_args()
    times = measure(args.repeats)
    for name, value in times.items():
        print(f"{name:>10}: {value * 1e3:.3f} ms per env step")
    predictions = {cores: predict(times, cores) for cores in args.cores}
    for cores, p in predictions.items():
        cpu, gpu = p["cpu_only"], p["gpu_learner_actor_bound"]
        print(f"{cores:>3} cores: predicted {cpu:8.0f} env steps/s on CPU; with a GPU learner, actors bound {gpu:8.0f}")
    if args.json:
        data = {**provenance.describe(), "seconds_per_env_step": times, "predicted_sps": predictions}
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
