"""Whole-process speed in alternating pairs: every script before and after a change, and against its peers.

Each command runs as a fresh process, the commands of a comparison in turn (A B A B ...), one torch thread
(``--torch-threads 1``, ``OMP_NUM_THREADS=1``), in a temporary working directory. For each run the tool records the
wall time and the CPU time (user + system, of the process and every child it waited for: env workers, actors),
from ``resource.getrusage(RUSAGE_CHILDREN)`` around it. It prints, per comparison, the median of each and the ratio
A / B of the medians and pair by pair (B / A is the speed-up of A when A is the new one).

    # every script of two trees (the same flags in both): this commit against main before the change
    python benchmark/scripts/speed_pairs.py trees --before /path/to/old/checkout --after . --repeats 3 \\
        --json /tmp/runtime_before_after.json
    # dqn.py against CleanRL's dqn.py and SB3's DQN, ppo.py against SB3's PPO (same hyperparameters, CartPole-v1)
    python benchmark/scripts/speed_pairs.py peers --cleanrl-python /tmp/crl-venv/bin/python \\
        --cleanrl-scripts /tmp/crl-venv/cleanrl_peer --repeats 5 --json /tmp/cartpole_peers.json
    # several trees files (say, two sets of scripts) in one: the first file's provenance, every file's command
    python benchmark/scripts/speed_pairs.py merge /tmp/a.json /tmp/b.json --json /tmp/trees.json
    # a result kept goes under benchmark/results/<topic>/ with its measurement in benchmark/scripts/report.py

The peers: CleanRL's scripts run unmodified in a virtual environment with the versions they were written for
(``benchmark/scripts/peer_venv.sh`` builds one; for ``dqn.py`` add ``stable-baselines3==2.3.2`` and CleanRL's
``cleanrl_utils/buffers.py``); SB3's algorithms run from ``benchmark/scripts/speed.py``'s programs, with its
hyperparameters (SB3's DQN clips gradients at norm 10 and uses the Huber loss; the others match exactly).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import provenance
import speed

ROOT = Path(__file__).resolve().parents[2]

TIMED: dict[str, list[str]] = {
    # each about 10-40 s on one core; the scripts' own hyperparameters otherwise
    "ppo": ["--total-timesteps", "40960"],
    "a2c": ["--total-timesteps", "20000"],
    "pqn": ["--total-timesteps", "40960"],
    "ppo_lstm": ["--total-timesteps", "16384"],
    "dqn": ["--total-timesteps", "20000", "--learning-starts", "1000"],
    "c51": ["--total-timesteps", "15000", "--learning-starts", "1000"],
    "qrdqn": ["--total-timesteps", "15000", "--learning-starts", "1000"],
    "ppo_structured": ["--total-timesteps", "8192"],
    "dqn_structured": ["--total-timesteps", "10000", "--learning-starts", "1000"],
    "ppo_trxl": ["--total-timesteps", "4096"],
    "ppo_continuous": ["--total-timesteps", "8192"],
    "rpo_continuous": ["--total-timesteps", "8192"],
    "ppo_continuous_lstm": ["--total-timesteps", "8192"],
    "ddpg_continuous": ["--total-timesteps", "3000", "--learning-starts", "1000"],
    "td3_continuous": ["--total-timesteps", "3000", "--learning-starts", "1000"],
    "sac_continuous": ["--total-timesteps", "2500", "--learning-starts", "1000"],
    "ppo_atari": ["--total-timesteps", "4096"],
    "ppo_atari_lstm": ["--total-timesteps", "2048"],
    "ddp_ppo": ["--total-timesteps", "4096"],
    "dqn_atari": ["--total-timesteps", "3000", "--learning-starts", "1000", "--buffer-size", "5000"],
    "c51_atari": ["--total-timesteps", "3000", "--learning-starts", "1000", "--buffer-size", "5000"],
    "qrdqn_atari": ["--total-timesteps", "3000", "--learning-starts", "1000", "--buffer-size", "5000"],
    "rainbow_atari": ["--total-timesteps", "2000", "--learning-starts", "1000", "--buffer-size", "5000"],
    "sac_atari": ["--total-timesteps", "2000", "--learning-starts", "1000", "--buffer-size", "5000"],
    "impala_atari": ["--num-actors", "1", "--total-timesteps", "10240"],
    "apex_dqn_atari": [
        "--num-actors",
        "1",
        "--buffer-size",
        "20000",
        "--learning-starts",
        "1000",
        "--total-timesteps",
        "4000",
    ],
    "r2d2_async": ["--num-actors", "1", "--buffer-size", "1000", "--learning-starts", "1000", "--total-timesteps", "4000"],
    "ppo_atari_envpool": ["--total-timesteps", "8192"],
    "pqn_atari_envpool": ["--total-timesteps", "8192"],
    "pqn_atari_envpool_lstm": ["--total-timesteps", "4096"],
    "ppo_rnd_envpool": ["--num-envs", "16", "--total-timesteps", "4096", "--num-iterations-obs-norm-init", "2"],
    "ppo_procgen": ["--total-timesteps", "16384"],
    "ppg_procgen": ["--num-envs", "16", "--total-timesteps", "8192", "--n-iteration", "2"],
    "ppo_pettingzoo": ["--env-id", "cleanrl_utils.envs:MinefieldRace", "--total-timesteps", "8192"],
}
"""Flags of each script's timed run (both trees take the same)."""


def timed(argv: list[str], env: dict, cwd: Path) -> dict:
    """Run ``argv``; its wall and CPU seconds (user + system, itself and the children it waited for) and exit code."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    result = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall, after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"wall": round(wall, 3), "cpu": round(cpu, 3), "returncode": result.returncode, "stderr": result.stderr[-2000:]}


def alternate(commands: dict[str, tuple[list[str], dict]], repeats: int, warmup: int = 1) -> dict[str, list[dict]]:
    """Each of ``commands`` (label -> (argv, extra environment)) ``repeats`` times, in turn, after ``warmup`` rounds."""
    runs: dict[str, list[dict]] = {label: [] for label in commands}
    for repeat in range(1 - warmup, repeats + 1):
        for label, (argv, extra) in commands.items():
            with tempfile.TemporaryDirectory() as cwd:
                env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **extra}
                env.pop("WANDB_API_KEY", None)
                result = timed(argv, env, Path(cwd))
            if result["returncode"] != 0:
                raise SystemExit(f"{label} exited {result['returncode']}: {' '.join(argv)}\n{result['stderr']}")
            if repeat > 0:  # a warm-up round warms the disk caches and is not counted
                runs[label].append(result)
            print(
                f"{label}: {result['wall']:.1f} s wall, {result['cpu']:.1f} s CPU" + (" (warm-up)" * (repeat <= 0)), flush=True
            )
    return runs


def summary(runs: dict[str, list[dict]]) -> dict:
    """Medians of each label and, for the first label against each other one, the ratios of the medians and pair by
    pair (other / first: above 1 means the first is faster)."""
    labels, out = list(runs), {}
    for label in labels:
        out[label] = {key: statistics.median(run[key] for run in runs[label]) for key in ("wall", "cpu")}
    first = labels[0]
    for other in labels[1:]:
        for key in ("wall", "cpu"):
            pairs = [b[key] / a[key] for a, b in zip(runs[first], runs[other])]
            out[f"{other} / {first} ({key})"] = {"of medians": round(out[other][key] / out[first][key], 3), "pairs": pairs}
    return out


def trees(args: argparse.Namespace) -> dict:
    """Every script (or ``--scripts``) of ``--after`` against ``--before``."""
    results = {}
    for name in args.scripts or list(TIMED):
        commands = {
            tree: (
                [sys.executable, str(Path(path).resolve() / "cleanrl" / f"{name}.py"), *TIMED[name]],
                {"PYTHONPATH": str(Path(path).resolve())},
            )
            for tree, path in (("after", args.after), ("before", args.before))
        }
        try:
            runs = alternate(commands, args.repeats, args.warmup)
        except SystemExit as failed:  # one script's failed run: said, kept in the results, the others still measured
            print(failed, file=sys.stderr, flush=True)
            results[name] = {"flags": TIMED[name], "failed": str(failed)}
            continue
        results[name] = {"flags": TIMED[name], "runs": runs, "summary": summary(runs)}
        ratio = results[name]["summary"]["before / after (cpu)"]["of medians"]
        print(f"{name}: before / after CPU time {ratio:.3f} (above 1: the change is faster)", flush=True)
    return results


def peers(args: argparse.Namespace) -> dict:
    """dqn.py against CleanRL's dqn.py and SB3's DQN; ppo.py against CleanRL's ppo.py and SB3's PPO (CartPole-v1)."""
    results, steps = {}, args.total_timesteps
    for name, hyper, program in (("dqn", speed.DQN, speed.SB3_DQN), ("ppo", speed.PPO, speed.SB3_PPO)):
        ours = [sys.executable, str(ROOT / "cleanrl" / f"{name}.py"), *speed.flags(hyper), "--total-timesteps", str(steps)]
        ours += ["--env-id", "CartPole-v1", "--seed", "1", "--torch-threads", "1"]
        sb3 = [sys.executable, "-c", program, json.dumps(hyper), str(steps), "1", "1"]
        commands = {"ours": (ours, {"PYTHONPATH": str(ROOT)}), "sb3": (sb3, {})}
        if args.cleanrl_python:
            theirs = [args.cleanrl_python, str(Path(args.cleanrl_scripts) / f"{name}.py"), *speed.flags(hyper)]
            theirs += ["--total-timesteps", str(steps), "--env-id", "CartPole-v1", "--seed", "1"]
            commands["cleanrl"] = (theirs, {"PYTHONPATH": str(args.cleanrl_scripts)})
        runs = alternate(commands, args.repeats, args.warmup)
        results[name] = {"hyperparameters": hyper, "steps": steps, "runs": runs, "summary": summary(runs)}
        for key, value in results[name]["summary"].items():
            if "/" in key:
                print(f"{name}: {key}: {value['of medians']:.3f}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    tree = commands.add_parser("trees", help="every script of two checkouts")
    tree.add_argument("--before", required=True)
    tree.add_argument("--after", default=str(ROOT))
    tree.add_argument("--scripts", nargs="+")
    peer = commands.add_parser("peers", help="dqn.py and ppo.py against CleanRL's and SB3's")
    peer.add_argument("--cleanrl-python", help="the interpreter of a CleanRL virtual environment")
    peer.add_argument("--cleanrl-scripts", help="the folder holding CleanRL's dqn.py and ppo.py (and its cleanrl_utils/)")
    peer.add_argument("--total-timesteps", type=int, default=50000)
    for sub in (tree, peer):
        sub.add_argument("--repeats", type=int, default=3)
        sub.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted (0 for long runs)")
        sub.add_argument("--json", type=Path)
    merge = commands.add_parser("merge", help="the results of several trees files (runs of one tree pair) in one file")
    merge.add_argument("files", type=Path, nargs="+")
    merge.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "merge":
        parts = [json.loads(path.read_text()) for path in args.files]
        document = {key: value for key, value in parts[0].items() if key != "results"}
        document["command"] = [part["command"] for part in parts]
        document["results"] = {name: result for part in parts for name, result in part["results"].items()}
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        return
    results = trees(args) if args.command == "trees" else peers(args)
    if args.json:
        document = {
            "what": f"whole-process wall and CPU time in alternating pairs ({args.command}); speed_pairs.py says how",
            "command": shlex.join(["python", os.path.relpath(__file__, ROOT), *sys.argv[1:]]),
            "python": platform.python_version(),
            **provenance.describe(),
            "results": results,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
