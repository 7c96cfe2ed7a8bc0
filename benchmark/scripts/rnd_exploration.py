"""ppo_rnd_envpool.py beside CleanRL's ppo_rnd_envpool.py and beside itself without intrinsic reward, on Montezuma's Revenge.

Subcommands, each writing one json (--json to put it elsewhere):
  train     one run, pinned with taskset to one core, one torch thread: ``ours`` (cleanrl/ppo_rnd_envpool.py),
            ``ours-no-rnd`` (the same with --int-coef 0: PPO on the game's reward alone, the predictor still
            trained and its reward logged) or ``peer`` (CleanRL's file, unmodified, in the venv
            benchmark/scripts/peer_venv.sh builds, run by a launcher that sets one torch thread and saves its agent).
            Ours run in this process's Python with EnvPool's RAM recorded (room = RAM byte 3, x = byte 42,
            y = byte 43): the rooms and the cells (room, x // 8, y // 8) the training envs visited, after the
            random play. CleanRL's EnvPool (0.8.4) gives no RAM, so its runs are measured by ``evaluate``.
  evaluate  the final policy of each run (and a uniformly random policy) plays --games whole games in EnvPool
            1.2.5 (sticky actions, no episodic life), actions sampled from π: rooms and cells visited, game
            scores. The same measure for every side, CleanRL's included.
  report    the table: steps, wall time, the intrinsic-reward curve (ours: charts/intrinsic_reward, the mean
            ||f̂ - f||² per step of each rollout; both: the predictor's loss, losses/rnd_loss and CleanRL's
            losses/fwd_loss, the same quantity), games with a positive score during training, rooms and
            cells visited in training (ours) and in the evaluation (all).

    bash benchmark/scripts/peer_venv.sh /tmp/rnd-peer /path/to/cleanrl   # then copy its ppo_rnd_envpool.py, see rnd.sh
    bash benchmark/scripts/rnd.sh

Both sides get CleanRL's defaults except the sizes a CPU can run (--num-envs, --total-timesteps); the 50
rollouts of random play for the observation statistics are CleanRL's rule (50 x num_envs x num_steps steps,
not counted in the training steps by either side).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PEER_VENV = Path("/tmp/rnd-peer")
ROOM, X, Y = 3, 42, 43  # Montezuma's Revenge's RAM bytes: the room, the player's x and y
CELL = 8  # pixels of a cell's side


def cells_of(ram: np.ndarray) -> set[tuple[int, int, int]]:
    """The (room, x // 8, y // 8) cells of RAM rows ``[num_envs, 128]``."""
    return set(zip(ram[:, ROOM].tolist(), (ram[:, X] // CELL).tolist(), (ram[:, Y] // CELL).tolist()))


def train_ours(args: argparse.Namespace, flags: list[str]) -> None:
    """cleanrl/ppo_rnd_envpool.py in this process, its training envs' RAM recorded after the random play."""
    import envpool
    import gymnasium as gym
    import torch

    skip = args.init_rollouts * args.num_steps  # vector steps of random play: not training
    record = {"cells": set(), "rooms": set(), "curve": []}

    class RamRecorder(gym.vector.VectorWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.steps = 0

        def step(self, actions):
            result = self.env.step(actions)
            self.steps += 1
            if self.steps > skip:
                ram = result[4]["ram"]
                record["cells"] |= cells_of(ram)
                record["rooms"] |= set(ram[:, ROOM].tolist())
                if (self.steps - skip) % args.num_steps == 0:
                    record["curve"].append([(self.steps - skip) * self.num_envs, len(record["cells"]), len(record["rooms"])])
            return result

    make = envpool.make

    def recorded_make(*a, **kwargs):
        envs = make(*a, **kwargs)
        recorded = kwargs.get("episodic_life") and not args.no_ram  # the training envs, not the evaluation's
        return RamRecorder(envs) if recorded else envs

    envpool.make = recorded_make
    sys.path.insert(0, str(ROOT))
    sys.argv = ["ppo_rnd_envpool.py", *flags, "--torch-threads", "1", "--num-threads", "1"]
    start = time.monotonic()
    g = runpy.run_path(str(ROOT / "cleanrl" / "ppo_rnd_envpool.py"), run_name="__main__")
    torch.save({"agent": g["agent"].state_dict(), "global_step": g["global_step"]}, "agent.pt")  # in the run's folder
    training = {
        "wall_s": round(time.monotonic() - start, 1),
        "cells": len(record["cells"]),
        "rooms": sorted(record["rooms"]),
        "curve": record["curve"],
    }
    Path("training_ram.json").write_text(json.dumps(training))


def command_train(args: argparse.Namespace) -> None:
    flags = [
        "--seed",
        str(args.seed),
        "--num-envs",
        str(args.num_envs),
        "--num-steps",
        str(args.num_steps),
        "--total-timesteps",
        str(args.total_timesteps),
        "--num-iterations-obs-norm-init",
        str(args.init_rollouts),
    ]
    if args.side == "ours-no-rnd":
        flags += ["--int-coef", "0"]
    if args.inner:  # the pinned child process, in the run's folder
        train_ours(args, flags)
        return
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    pin = ["taskset", "-c", str(args.core)]
    if args.side == "peer":
        script = PEER_VENV / "cleanrl_peer" / "ppo_rnd_envpool.py"
        launcher = [str(PEER_VENV / "bin" / "python"), str(Path(__file__).resolve()), "peer-inner", str(script)]
        command = [*pin, *launcher, str(out / "agent.pt"), *flags]
    else:
        command = [*pin, sys.executable, str(Path(__file__).resolve()), *sys.argv[1:], "--inner"]
    start, cpu, where = time.monotonic(), os.times(), provenance.describe()  # the commit the run starts from
    with open(out / "output.txt", "w") as log:
        subprocess.run(command, cwd=out, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    after = os.times()
    meta = {
        "side": args.side,
        "flags": flags,
        "seed": args.seed,
        "wall_s": round(time.monotonic() - start, 1),
        "cpu_s": round(after.children_user + after.children_system - cpu.children_user - cpu.children_system, 1),
        **where,
    }
    (out / "run.json").write_text(json.dumps(meta, indent=1))


def peer_inner(argv: list[str]) -> None:
    """In the peer venv: CleanRL's script, unmodified, run as __main__ with one torch thread; its agent saved."""
    import torch

    torch.set_num_threads(1)
    script, out, *flags = argv
    sys.argv = [script, *flags]
    g = runpy.run_path(script, run_name="__main__")
    torch.save({"agent": g["agent"].state_dict(), "global_step": g["global_step"]}, out)


def load_agent(path: Path, envs):
    """Our Agent with a run's saved weights (CleanRL's trunk is called ``network``: the same layers)."""
    import torch

    sys.path.insert(0, str(ROOT))
    from cleanrl.ppo_rnd_envpool import Agent

    agent = Agent(envs).to(memory_format=torch.channels_last)
    saved = torch.load(path, weights_only=True)["agent"]
    agent.load_state_dict({key.replace("network.", "trunk.", 1): value for key, value in saved.items()})
    return agent.eval()


def play(agent, games: int, seed: int, num_envs: int) -> dict:
    """Whole games (sticky actions, no episodic life) of ``agent`` (None: uniformly random actions) in EnvPool:
    rooms and cells visited over all games, game scores."""
    import torch

    sys.path.insert(0, str(ROOT))
    from cleanrl.ppo_rnd_envpool import make_envs

    envs = make_envs("MontezumaRevenge-v5", seed, False, "", training=False, num_envs=num_envs, num_threads=1)
    generator, rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
    obs, info = envs.reset()
    cells, rooms, scores, steps = set(), set(), [], 0
    while len(scores) < games:
        if agent is None:
            actions = rng.integers(envs.single_action_space.n, size=num_envs)
        else:
            with torch.inference_mode():
                logits = agent.actor(agent.hidden(torch.as_tensor(obs)))
                actions = torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0].numpy()
        obs, _, _, _, info = envs.step(actions)
        steps += num_envs
        cells |= cells_of(info["ram"])
        rooms |= set(info["ram"][:, ROOM].tolist())
        scores += info["episode"]["r"][info["_episode"]].tolist()
    envs.close()
    scores = scores[:games]
    return {
        "games": games,
        "steps": steps,
        "cells": len(cells),
        "rooms": sorted(rooms),
        "mean_score": float(np.mean(scores)),
        "positive_games": int(np.sum(np.array(scores) > 0)),
    }


def command_evaluate(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT))
    from cleanrl.ppo_rnd_envpool import make_envs

    shape = make_envs("MontezumaRevenge-v5", 0, False, "", training=False)  # for the action space
    shape.close()
    results = {"random policy": play(None, args.games, args.seed, args.num_envs)}
    for run in args.runs:
        results[run] = play(load_agent(Path(run) / "agent.pt", shape), args.games, args.seed, args.num_envs)
        print(run, results[run], flush=True)
    Path(args.json).write_text(json.dumps({**provenance.describe(), "evaluation": results}, indent=1))


def scalars(directory: Path) -> dict[str, list[tuple[int, float, float]]]:
    """``tag -> [(step, value, wall_time)]`` from a run directory's TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value, e.wall_time) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def command_report(args: argparse.Namespace) -> None:
    evaluation = json.loads(Path(args.evaluation).read_text())["evaluation"] if args.evaluation else {}
    rows = {}
    for run in map(Path, args.runs):
        meta = json.loads((run / "run.json").read_text())
        tags = scalars(next((run / "runs").iterdir()))
        loss = tags.get("losses/rnd_loss") or tags.get("losses/fwd_loss")
        reward = tags.get("charts/intrinsic_reward", [])
        sps_tag = tags["charts/SPS"]
        returns = [value for _, value, _ in tags.get("charts/episodic_return", [])]
        training = json.loads((run / "training_ram.json").read_text()) if (run / "training_ram.json").exists() else None
        rows[meta["side"]] = {
            "run": str(run),
            "steps": sps_tag[-1][0],
            "wall_s": meta["wall_s"],
            "cpu_s": meta["cpu_s"],
            "seconds_per_iteration": round(seconds_per_iteration(run), 2),
            "predictor_loss": [round(v, 4) for _, v, _ in loss],
            "intrinsic_reward": [round(v, 2) for _, v, _ in reward],
            "entropy_first_last": [round(tags["losses/entropy"][i][1], 3) for i in (0, -1)],
            "value_loss_first_last": [round(tags["losses/value_loss"][i][1], 4) for i in (0, -1)],
            "games": len(returns),
            "positive_games": int(np.sum(np.array(returns) > 0)),
            "training_cells": training and training["cells"],
            "training_rooms": training and training["rooms"],
            "evaluation": evaluation.get(str(run)),
        }
    rows["random policy"] = {"evaluation": evaluation.get("random policy")}
    Path(args.json).write_text(json.dumps({**provenance.describe(), "runs": rows}, indent=1))
    for name, row in rows.items():
        print(name, json.dumps(row)[:600])


def seconds_per_iteration(run: Path) -> float:
    """Mean wall time between two iterations' charts/SPS events: the training loop alone (not the imports, the env
    set-up, the random play or an evaluation)."""
    sps = scalars(next((run / "runs").iterdir()))["charts/SPS"]
    return (sps[-1][2] - sps[0][2]) / (len(sps) - 1)


def command_speed(args: argparse.Namespace) -> None:
    """Alternating pairs (ours, peer, ours, peer ...), each a fresh process pinned to one core, one torch thread, one
    EnvPool thread for ours (CleanRL's sets none: EnvPool's default), 8 envs x 128 steps, one rollout of random play."""
    pairs = []
    for repeat in range(args.repeats):
        pair = {}
        for side in ("ours", "peer"):
            out = Path(args.out) / f"{side}-{repeat}"
            steps = str(args.iterations * 1024)
            flags = ["--num-envs", "8", "--total-timesteps", steps, "--init-rollouts", "1", "--core", str(args.core)]
            argv = [sys.executable, str(Path(__file__).resolve()), "train", side, "--out", str(out), *flags, "--no-ram"]
            subprocess.run(argv, check=True)
            pair[side] = round(seconds_per_iteration(out), 2)
        pair["ratio"] = round(pair["peer"] / pair["ours"], 2)  # > 1: ours is faster
        pairs.append(pair)
        print(pair, flush=True)
    result = {
        **provenance.describe(),
        "what": "seconds per training iteration (8 envs x 128 steps, 4 epochs x 4 minibatches), pinned to one core",
        "pairs": pairs,
        "median_ratio": float(np.median([pair["ratio"] for pair in pairs])),
    }
    Path(args.json).write_text(json.dumps(result, indent=1))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "peer-inner":
        peer_inner(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train")
    train.add_argument("side", choices=["ours", "ours-no-rnd", "peer"])
    train.add_argument("--out", required=True, help="the run's folder (its runs/, agent.pt, run.json)")
    train.add_argument("--seed", type=int, default=1)
    train.add_argument("--num-envs", type=int, default=8)
    train.add_argument("--num-steps", type=int, default=128)
    train.add_argument("--total-timesteps", type=int, default=40960)
    train.add_argument("--init-rollouts", type=int, default=50, help="--num-iterations-obs-norm-init")
    train.add_argument("--core", type=int, default=1, help="the core taskset pins the run to")
    train.add_argument("--no-ram", action="store_true", help="ours: do not record the RAM (speed runs)")
    train.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    speed = sub.add_parser("speed")
    speed.add_argument("--repeats", type=int, default=3)
    speed.add_argument("--iterations", type=int, default=4, help="training rollouts of 8 x 128 steps per run")
    speed.add_argument("--out", default="/tmp/rnd-speed")
    speed.add_argument("--core", type=int, default=1)
    speed.add_argument("--json", default="benchmark/results/exploration/montezuma_rnd_speed_vs_cleanrl.json")
    evaluate = sub.add_parser("evaluate")
    evaluate.add_argument("runs", nargs="+")
    evaluate.add_argument("--games", type=int, default=16)
    evaluate.add_argument("--num-envs", type=int, default=8)
    evaluate.add_argument("--seed", type=int, default=100_001)
    evaluate.add_argument("--json", default="benchmark/results/exploration/montezuma_rnd_evaluation.json")
    report = sub.add_parser("report")
    report.add_argument("runs", nargs="+")
    report.add_argument("--evaluation", help="the json of evaluate")
    report.add_argument("--json", default="benchmark/results/exploration/montezuma_rnd_training.json")
    args = parser.parse_args()
    commands = {"train": command_train, "evaluate": command_evaluate, "report": command_report, "speed": command_speed}
    commands[args.command](args)


if __name__ == "__main__":
    main()
