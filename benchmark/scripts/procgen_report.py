"""Summarise the runs of benchmark/scripts/procgen_ppo.sh: ours beside CleanRL's script at equal steps, return and speed.

    python benchmark/scripts/procgen_report.py RUNS_DIR --steps 32768 --window 16384 --core 0 \
        --json benchmark/results/procgen/starpilot_ppo_vs_cleanrl.json

``RUNS_DIR`` holds one folder a run, ``{ours,cleanrl}-{seed}``, each with the run's ``runs/*/`` TensorBoard events
(both scripts write the same tags), its ``command.txt`` and ``time.txt`` (``/usr/bin/time -f "%e %U %S"``: wall,
user and system seconds of the whole process). Per run: the steps trained, the mean ``charts/episodic_return`` of
the episodes logged in the last ``--window`` steps (CleanRL's script logs at most one ended episode per vector
step, the first env's; ours logs all), the ``charts/SPS`` of its last iteration (steps over the loop's time),
steps over the process's wall time and over its CPU time (user + system: less sensitive to other work on the
core). Then per side the means over seeds, and ours / CleanRL's for the three speeds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import provenance


def read_run(folder: Path, steps: int, window: int) -> dict:
    """One run's numbers (see the module docstring)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = [path.parent for path in folder.glob("runs/*/events.out.tfevents.*")]
    accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
    accumulator.Reload()
    episodes = accumulator.Scalars("charts/episodic_return")
    last = [e.value for e in episodes if e.step > steps - window]
    sps = accumulator.Scalars("charts/SPS")
    wall, user, system = (float(x) for x in (folder / "time.txt").read_text().split()[-3:])
    trained = max(e.step for e in sps)
    assert trained == steps, f"{folder} trained {trained} steps, not {steps}"
    return {
        "command": (folder / "command.txt").read_text().strip(),
        "steps": trained,
        "episodes_in_window": len(last),
        "return_in_window": round(float(np.mean(last)), 3) if last else None,
        "episodes_logged": len(episodes),
        "sps_logged": sps[-1].value,
        "wall_s": wall,
        "cpu_s": round(user + system, 1),
        "sps_wall": round(trained / wall, 1),
        "steps_per_cpu_s": round(trained / (user + system), 1),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--window", type=int, default=16384, help="steps at the end whose episodes are averaged")
    parser.add_argument("--core", type=str, default="0", help="the core the runs were pinned to (recorded)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    runs = {folder.name: read_run(folder, args.steps, args.window) for folder in sorted(args.runs.iterdir())}
    sides = {}
    for side in ("ours", "cleanrl"):
        mine = [run for name, run in runs.items() if name.startswith(f"{side}-")]
        sides[side] = {
            "seeds": len(mine),
            "return_in_window": round(float(np.mean([run["return_in_window"] for run in mine])), 3),
            "sps_logged": round(float(np.mean([run["sps_logged"] for run in mine])), 1),
            "sps_wall": round(float(np.mean([run["sps_wall"] for run in mine])), 1),
            "steps_per_cpu_s": round(float(np.mean([run["steps_per_cpu_s"] for run in mine])), 1),
        }
    result = {
        **provenance.describe(),
        "pinned_to_core": args.core,
        "env": "starpilot, distribution_mode easy, num_levels 0, start_level 0",
        "steps": args.steps,
        "window": args.window,
        "runs": runs,
        "means": sides,
        "sps_ratio_logged": round(sides["ours"]["sps_logged"] / sides["cleanrl"]["sps_logged"], 2),
        "sps_ratio_wall": round(sides["ours"]["sps_wall"] / sides["cleanrl"]["sps_wall"], 2),
        "steps_per_cpu_s_ratio": round(sides["ours"]["steps_per_cpu_s"] / sides["cleanrl"]["steps_per_cpu_s"], 2),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
