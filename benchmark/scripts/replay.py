"""Replay-buffer benchmark: ours (uniform and prioritized) against stable-baselines3's ReplayBuffer.

Atari-shaped data: observations ``Box(0, 255, (4, 84, 84), uint8)`` (our buffers with
``frame_stack=4``, which store each 84x84 frame once), ``Discrete(4)`` actions, one env.
For each size N and buffer kind:

- skip the buffer (recorded as skipped, with the reason) when its arrays would not fit in
  ``--memory-fraction`` of MemAvailable;
- fill it with N transitions (then time `--steady-adds` more into the full ring,
  whose memory is already touched): episodes of 800 to 1200 steps, a quarter of them ending by
  truncation, frame stacks that shift by one frame per step with zero padding at episode
  starts (as ``FrameStackObservation(padding_type="zero")``); frames come from a small
  pre-generated pool and only the ``add`` calls are timed (transitions per second);
- memory: the arrays' bytes (ours: ``rb.nbytes``; SB3: the sum of its arrays' ``nbytes``)
  and the growth of the process's resident memory (VmRSS of /proc/self/status) over
  construction and fill, and of its peak (VmHWM, reset before construction);
- ``sample(256)``: median and p90 over ``--samples`` calls after ``--warmup`` calls; for
  the prioritized buffer, ``update_priorities`` of the sampled indices with random
  priorities between samples, timed separately;
- a consistency check on one sampled batch: the next observation's stack is the
  observation's stack shifted by one frame.

    python benchmark/scripts/replay.py --sizes 100000 1000000 --json benchmark/results/replay/buffers_vs_sb3.json

Each buffer is freed (del + gc) before the next one is built.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import stable_baselines3
import torch
from provenance import git
from stable_baselines3.common.buffers import ReplayBuffer as SB3ReplayBuffer

from cleanrl_utils.buffers import PrioritizedReplayBuffer, ReplayBuffer, SumTree

ROOT = Path(__file__).resolve().parents[2]
KINDS = ["ours", "ours_prioritized", "sb3", "sb3_optimized"]
LABELS = {
    "ours": "ours uniform",
    "ours_prioritized": "ours prioritized",
    "sb3": "SB3",
    "sb3_optimized": "SB3 optimize_memory_usage",
}
FRAME = (84, 84)
STACK = 4
BATCH = 256
OBS_SPACE = gym.spaces.Box(0, 255, (STACK, *FRAME), np.uint8)
ACTION_SPACE = gym.spaces.Discrete(4)


# --------------------------------------------------------------------------------------------
# Machine


def proc_status(field: str) -> int:
    """A memory field of /proc/self/status, in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def mem_available() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise KeyError("MemAvailable")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def meta() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    dirty = git("status", "--porcelain").splitlines()
    sources = {}
    for name in ["cleanrl_utils/buffers.py", "cleanrl_utils/namedarraytuple.py"]:
        path = ROOT / name
        if path.exists():
            sources[name] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return dict(
        commit=git("rev-parse", "--short", "HEAD") + ("-dirty" if dirty else ""),
        uncommitted=dirty,
        source_sha256=sources,
        cpu_model=cpu,
        cpus=os.cpu_count(),
        mem_total_gib=round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        python=platform.python_version(),
        torch=torch.__version__,
        numpy=np.__version__,
        stable_baselines3=stable_baselines3.__version__,
        gymnasium=gym.__version__,
        torch_threads=torch.get_num_threads(),
        time=time.strftime("%Y-%m-%dT%H:%M:%S"),
        loadavg_start=loadavg(),
    )


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


# --------------------------------------------------------------------------------------------
# Data


class Stream:
    """Pre-generated Atari-like steps: a pool of frames and a schedule of actions, rewards, episode ends.

    Frame ``c`` (a global counter, one per observation) is pool frame ``c % P``, filled with
    ``1 + c % P % 255`` and the counter in its first bytes. ``seq`` repeats the pool so that
    the stack of frames ``c-3..c`` is the view ``seq[(c-3) % P : (c-3) % P + 4]``: no copy per
    step except the first steps of an episode, whose frames before the episode are zeroed.
    """

    def __init__(self, n: int, seed: int, pool: int = 1024):
        rng = np.random.default_rng(seed)
        self.n, self.pool = n, pool
        frames = np.empty((pool, *FRAME), np.uint8)
        for k in range(pool):
            frames[k] = 1 + k % 255
            frames[k, 0, :4] = np.frombuffer(np.uint32(k).tobytes(), np.uint8)
        self.seq = np.concatenate([frames, frames[:STACK]])[None]  # [1, P + 4, 84, 84]
        self.actions = rng.integers(0, 4, size=n)
        self.rewards = (rng.random(n) < 0.05).astype(np.float32)
        self.terminations = np.zeros(n, bool)
        self.truncations = np.zeros(n, bool)
        t = -1
        while True:
            t += int(rng.integers(800, 1201))
            if t >= n:
                break
            (self.truncations if rng.random() < 0.25 else self.terminations)[t] = True
        if not self.terminations[n - 1]:
            self.truncations[n - 1] = True  # each pass ends an episode, so a second pass may follow
        self.episodes_ended = int(self.terminations.sum() + self.truncations.sum())

    def stack(self, newest: int, episode_first: int) -> np.ndarray:
        """``[1, 4, 84, 84]``: frames newest-3..newest, zero before frame ``episode_first``."""
        start = (newest - STACK + 1) % self.pool
        view = self.seq[:, start : start + STACK]
        zeros = episode_first - (newest - STACK + 1)
        if zeros <= 0:
            return view
        obs = view.copy()
        obs[:, :zeros] = 0
        return obs

    def steps(self, limit: int | None = None):
        """Yield ``(t, obs, next_obs)`` for the first ``limit`` steps (all by default); next_obs is
        the real next observation (the final one where an episode ended)."""
        frame = episode_first = 0
        done = self.terminations | self.truncations
        for t in range(self.n if limit is None else min(limit, self.n)):
            yield t, self.stack(frame, episode_first), self.stack(frame + 1, episode_first)
            if done[t]:
                frame += 2  # frame + 1 was the final observation; frame + 2 starts the next episode
                episode_first = frame
            else:
                frame += 1


# --------------------------------------------------------------------------------------------
# Buffers


def estimated_bytes(kind: str, n: int) -> int:
    """Bytes of a buffer's arrays before building it (ours: linear fit on two small buffers)."""
    if kind.startswith("sb3"):
        obs = n * STACK * FRAME[0] * FRAME[1] * (1 if kind == "sb3_optimized" else 2)
        return obs + n * (8 + 4 + 4 + 4)  # actions int64, rewards, dones, timeouts float32
    small = [ReplayBuffer(c, 1, OBS_SPACE, ACTION_SPACE, frame_stack=STACK).nbytes for c in (1000, 2000)]
    per_row = (small[1] - small[0]) / 1000
    total = small[0] + (n - 1000) * per_row
    if kind == "ours_prioritized":
        total += 2 * SumTree.leaf_offset_of(n) * 8 + 8  # sum tree, largest priority
    return int(total)


def build(kind: str, n: int, seed: int):
    if kind == "ours":
        return ReplayBuffer(n, 1, OBS_SPACE, ACTION_SPACE, frame_stack=STACK, seed=seed)
    if kind == "ours_prioritized":
        return PrioritizedReplayBuffer(n, 1, OBS_SPACE, ACTION_SPACE, frame_stack=STACK, alpha=0.6, seed=seed)
    optimized = kind == "sb3_optimized"
    return SB3ReplayBuffer(
        n,
        OBS_SPACE,
        ACTION_SPACE,
        device="cpu",
        n_envs=1,
        optimize_memory_usage=optimized,
        handle_timeout_termination=not optimized,
    )


def array_bytes(kind: str, rb) -> int:
    if kind.startswith("ours"):
        return int(rb.nbytes)
    return int(sum(v.nbytes for v in vars(rb).values() if isinstance(v, np.ndarray)))


def fill(kind: str, rb, stream: Stream, limit: int | None = None) -> tuple[float, float]:
    """Add the stream's first ``limit`` transitions (all by default); return (seconds inside add
    calls, wall seconds of the loop)."""
    clock = time.perf_counter
    inside = 0.0
    actions, rewards, terms, truncs = stream.actions, stream.rewards, stream.terminations, stream.truncations
    dones = (terms | truncs).astype(np.float32)
    start = clock()
    if kind.startswith("ours"):
        for t, obs, next_obs in stream.steps(limit):
            s = slice(t, t + 1)
            a, r, te, tr = actions[s], rewards[s], terms[s], truncs[s]
            t0 = clock()
            rb.add(obs, a, r, te, tr, next_obs)
            inside += clock() - t0
    else:
        no_info, timeout_info = [{}], [{"TimeLimit.truncated": True}]
        optimized = kind == "sb3_optimized"
        for t, obs, next_obs in stream.steps(limit):
            s = slice(t, t + 1)
            a, r, d = actions[s], rewards[s], dones[s]
            infos = timeout_info if truncs[t] and not optimized else no_info
            t0 = clock()
            rb.add(obs, next_obs, a, r, d, infos)
            inside += clock() - t0
    return inside, clock() - start


def stored(kind: str, rb) -> int:
    if kind.startswith("ours"):
        return len(rb)
    return rb.size() - (1 if rb.optimize_memory_usage and rb.full else 0)


def check(kind: str, rb) -> dict:
    """On one batch: next_obs[:, :3] == obs[:, 1:] (stacks shift by one frame), newest frames nonzero.

    SB3's buffers have no episode-end marker usable to exclude transitions whose next_obs is
    not the next frame; the check counts all samples, and separately those not done.
    """
    batch = rb.sample(BATCH) if kind != "ours_prioritized" else rb.sample(BATCH, 0.4)
    if kind.startswith("ours"):
        obs, next_obs = batch.obs.numpy(), batch.next_obs.numpy()
    else:
        obs, next_obs = batch.observations.numpy(), batch.next_observations.numpy()
    shifted = (next_obs[:, :-1] == obs[:, 1:]).reshape(len(obs), -1).all(axis=1)
    if kind.startswith("ours"):
        done = (batch.terminations + batch.truncations).numpy().reshape(-1) > 0
    else:
        done = batch.dones.numpy().reshape(-1) > 0
    newest_nonzero = (obs[:, -1] != 0).reshape(len(obs), -1).any(axis=1)
    return dict(
        samples=len(obs),
        shifted=int(shifted.sum()),
        done=int(done.sum()),
        shifted_not_done=int(shifted[~done].sum()),
        not_done=int((~done).sum()),
        newest_frame_nonzero=int(newest_nonzero.sum()),
    )


def summary(times: list[float]) -> dict:
    ms = np.array(times) * 1e3
    return dict(
        median_ms=float(np.median(ms)),
        p90_ms=float(np.percentile(ms, 90)),
        mean_ms=float(ms.mean()),
        min_ms=float(ms.min()),
        calls=len(ms),
    )


def time_sampling(kind: str, rb, warmup: int, calls: int, seed: int) -> dict:
    clock = time.perf_counter
    rng = np.random.default_rng(seed)
    sample_times, update_times = [], []
    for i in range(warmup + calls):
        if kind == "ours_prioritized":
            t0 = clock()
            batch = rb.sample(BATCH, 0.4)
            t1 = clock()
            priorities = rng.random(BATCH)
            t2 = clock()
            rb.update_priorities(batch.indices, priorities)
            t3 = clock()
            if i >= warmup:
                sample_times.append(t1 - t0)
                update_times.append(t3 - t2)
        else:
            t0 = clock()
            batch = rb.sample(BATCH)
            t1 = clock()
            if i >= warmup:
                sample_times.append(t1 - t0)
        del batch
    result = dict(sample=summary(sample_times))
    if update_times:
        result["update_priorities"] = summary(update_times)
    return result


def measure(kind: str, n: int, stream: Stream, args) -> dict:
    record = dict(size=n, kind=kind)
    gc.collect()
    available = mem_available()
    need = estimated_bytes(kind, n)
    record.update(estimated_bytes=need, mem_available_bytes=available)
    if need > args.memory_fraction * available:
        reason = f"needs {need / 2**30:.1f} GiB > {args.memory_fraction:.0%} of MemAvailable ({available / 2**30:.1f} GiB)"
        print(f"[{n:>9,} {LABELS[kind]}] skipped: {reason}", flush=True)
        return dict(record, status="skipped", reason=reason)

    peak_reset = reset_peak_rss()
    rss_before = proc_status("VmRSS")
    rb = build(kind, n, args.seed)
    rss_built = proc_status("VmRSS")
    inside, wall = fill(kind, rb, stream)
    rss_filled = proc_status("VmRSS")
    steady = min(args.steady_adds, n)
    steady_inside, _ = fill(kind, rb, stream, steady) if steady > 0 else (None, None)
    record.update(
        status="measured",
        transitions_added=n,
        transitions_stored=stored(kind, rb),
        episodes_ended=stream.episodes_ended,
        array_bytes=array_bytes(kind, rb),
        rss_before_bytes=rss_before,
        rss_growth_built_bytes=rss_built - rss_before,
        rss_growth_filled_bytes=rss_filled - rss_before,
        add_seconds=inside,
        fill_wall_seconds=wall,
        add_per_second=n / inside,
        add_us=inside / n * 1e6,
        steady_adds=steady,
        steady_add_seconds=steady_inside,
        steady_add_per_second=steady / steady_inside if steady_inside else None,
        rss_growth_after_steady_bytes=proc_status("VmRSS") - rss_before,
    )
    print(
        f"[{n:>9,} {LABELS[kind]}] filled: {n / inside:,.0f} adds/s ({inside / n * 1e6:.1f} us each; "
        f"loop {wall:.1f} s); then {steady:,} more into the full ring: "
        f"{record['steady_add_per_second'] or 0:,.0f} adds/s; arrays {record['array_bytes'] / 2**30:.2f} GiB, "
        f"RSS +{record['rss_growth_filled_bytes'] / 2**30:.2f} GiB",
        flush=True,
    )
    record["check"] = check(kind, rb)
    record.update(time_sampling(kind, rb, args.warmup, args.samples, args.seed))
    record["rss_peak_growth_bytes"] = proc_status("VmHWM") - rss_before if peak_reset else None
    line = (
        f"[{n:>9,} {LABELS[kind]}] sample({BATCH}): median {record['sample']['median_ms']:.2f} ms, "
        f"p90 {record['sample']['p90_ms']:.2f} ms"
    )
    if "update_priorities" in record:
        line += (
            f"; update_priorities: median {record['update_priorities']['median_ms']:.3f} ms, "
            f"p90 {record['update_priorities']['p90_ms']:.3f} ms"
        )
    print(line + f"; check {record['check']}", flush=True)
    del rb
    gc.collect()
    record["rss_after_free_bytes"] = proc_status("VmRSS")
    return record


# --------------------------------------------------------------------------------------------
# Report


def gib(x) -> str:
    return "-" if x is None else f"{x / 2**30:.2f}"


def table(results: list[dict]) -> str:
    header = (
        "| N | buffer | stored | arrays (GiB) | RSS growth (GiB) | add (transitions/s) | "
        "add, full ring (transitions/s) | sample(256) median / p90 (ms) | update_priorities median / p90 (ms) | "
        "sample / ours uniform |"
    )
    rows = [header, "|" + "---|" * (header.count("|") - 1)]
    uniform = {r["size"]: r["sample"]["median_ms"] for r in results if r["kind"] == "ours" and r["status"] == "measured"}
    for r in results:
        if r["status"] != "measured":
            rows.append(f"| {r['size']:,} | {LABELS[r['kind']]} | skipped: {r['reason']} | | | | | | | |")
            continue
        update = r.get("update_priorities")
        ratio = r["sample"]["median_ms"] / uniform[r["size"]] if r["size"] in uniform else None
        rows.append(
            f"| {r['size']:,} | {LABELS[r['kind']]} | {r['transitions_stored']:,} | {gib(r['array_bytes'])} | "
            f"{gib(r['rss_growth_filled_bytes'])} | {r['add_per_second']:,.0f} | "
            f"{'-' if r['steady_add_per_second'] is None else format(r['steady_add_per_second'], ',.0f')} | "
            f"{r['sample']['median_ms']:.2f} / {r['sample']['p90_ms']:.2f} | "
            + (f"{update['median_ms']:.3f} / {update['p90_ms']:.3f}" if update else "-")
            + f" | {'-' if ratio is None else f'{ratio:.2f}x'} |"
        )
    return "\n".join(rows)


def targets(results: list[dict]) -> list[dict]:
    by = {(r["size"], r["kind"]): r for r in results if r["status"] == "measured"}
    uniform, prioritized = by.get((1_000_000, "ours")), by.get((1_000_000, "ours_prioritized"))
    out = []
    value = uniform["sample"]["median_ms"] if uniform else None
    out.append(
        dict(
            target="ours uniform sample(256) from a full 1M Atari buffer < 5 ms (median)",
            value=value,
            unit="ms",
            verdict="NOT MEASURED" if value is None else ("PASS" if value < 5.0 else "MISS"),
        )
    )
    ratio = prioritized["sample"]["median_ms"] / value if uniform and prioritized else None
    out.append(
        dict(
            target="ours prioritized sample(256) at 1M within 3x of uniform (ratio of medians)",
            value=ratio,
            unit="x",
            verdict="NOT MEASURED" if ratio is None else ("PASS" if ratio <= 3.0 else "MISS"),
        )
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--kinds", nargs="+", default=KINDS, choices=KINDS)
    parser.add_argument("--samples", type=int, default=200, help="timed sample(256) calls per buffer")
    parser.add_argument("--warmup", type=int, default=10, help="untimed sample calls first")
    parser.add_argument(
        "--memory-fraction", type=float, default=0.8, help="skip a buffer whose arrays exceed this fraction of MemAvailable"
    )
    parser.add_argument(
        "--steady-adds",
        type=int,
        default=100_000,
        help="adds timed again after the fill, into the full ring (memory already touched)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    info = meta()
    print(
        f"commit {info['commit']}, {info['cpus']} CPUs ({info['cpu_model']}), torch {info['torch']}, "
        f"numpy {info['numpy']}, SB3 {info['stable_baselines3']}, MemAvailable "
        f"{mem_available() / 2**30:.1f} GiB",
        flush=True,
    )
    results = []
    for n in args.sizes:
        stream = Stream(n, args.seed)
        for kind in args.kinds:
            results.append(measure(kind, n, stream, args))
        del stream
        gc.collect()

    print()
    print(table(results))
    print()
    by = {(r["size"], r["kind"]): r for r in results if r["status"] == "measured"}
    for n in args.sizes:
        for ours in ("ours", "ours_prioritized"):
            for sb3 in ("sb3", "sb3_optimized"):
                a, b = by.get((n, ours)), by.get((n, sb3))
                if a and b:
                    steady = (
                        f", full-ring add {a['steady_add_per_second'] / b['steady_add_per_second']:.2f}x"
                        if a["steady_add_per_second"] and b["steady_add_per_second"]
                        else ""
                    )
                    print(
                        f"N={n:,}: {LABELS[ours]} vs {LABELS[sb3]}: fill add {a['add_per_second'] / b['add_per_second']:.2f}x "
                        f"the rate{steady}, sample {a['sample']['median_ms'] / b['sample']['median_ms']:.2f}x the time, "
                        f"arrays {a['array_bytes'] / b['array_bytes']:.2f}x the bytes"
                    )
    goals = targets(results)
    for goal in goals:
        value = "-" if goal["value"] is None else f"{goal['value']:.2f} {goal['unit']}"
        print(f"{goal['verdict']}: {goal['target']}: {value}")
    if args.json:
        info["loadavg_end"] = loadavg()
        args.json.write_text(
            json.dumps(
                dict(
                    meta=dict(
                        info,
                        sizes=args.sizes,
                        batch_size=BATCH,
                        samples=args.samples,
                        warmup=args.warmup,
                        steady_adds=args.steady_adds,
                        memory_fraction=args.memory_fraction,
                        seed=args.seed,
                        argv=sys.argv[1:],
                    ),
                    results=results,
                    targets=goals,
                ),
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
