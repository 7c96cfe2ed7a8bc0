"""Value-based breadth side by side: PQN against CleanRL's scripts, QR-DQN against SB3-contrib.

Subcommands, each writing one json (--json to put it elsewhere):
  returns-pqn    cleanrl/pqn.py on CartPole-v1, Acrobot-v1, MountainCar-v0, seeds 1 2 3, 500k steps:
                 mean return of the last 20 episodes and of the whole curve, wall time, beside
                 CleanRL's published numbers (--peer also runs CleanRL's pqn.py).
  returns-qrdqn  cleanrl/qrdqn.py and SB3-contrib's QRDQN at qrdqn.py's hyperparameters, same envs
                 and seeds, --total-timesteps each (default 100k).
  speed          alternating pairs (ours, peer, ours, peer ...), each a fresh process pinned with
                 taskset to one core, one torch thread: pqn.py / CleanRL's pqn.py (CartPole-v1),
                 pqn_atari_envpool.py and pqn_atari_envpool_lstm.py / CleanRL's (Breakout-v5),
                 qrdqn.py / SB3-contrib QRDQN (CartPole-v1), and EnvPool alone in both environments.
  breakout       ours and CleanRL's pqn_atari_envpool.py and pqn_atari_envpool_lstm.py on Breakout-v5
                 at equal steps, alternating: last-20 return and steps per second.

CleanRL's side runs its unmodified files in the venv benchmark/scripts/peer_venv.sh builds:
    bash benchmark/scripts/peer_venv.sh /tmp/crl-venv /path/to/a/clone/of/cleanrl
    python benchmark/scripts/value_breadth.py returns-pqn --jobs 2
    python benchmark/scripts/value_breadth.py returns-qrdqn --jobs 2 --total-timesteps 100000
    python benchmark/scripts/value_breadth.py speed --repeats 3
    python benchmark/scripts/value_breadth.py breakout --total-timesteps 200000

Steps per second is over each side's training loop, from its first env step to its end, as each
reports it (ours: charts/SPS written after the last update, or for QR-DQN the final progress line;
CleanRL: its last "SPS:" line, also after the last update; SB3: steps over the wall time of
``model.learn``); the whole process's wall and CPU time are recorded beside it. Every run gets
OMP_NUM_THREADS=1, and ours --torch-threads 1. What the two sides do differently is listed in
each json under "not_matched"; --runs-dir keeps every run's TensorBoard events and output.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import provenance
from speed import DQN

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0"]
ATARI_ENV = "Breakout-v5"
PEER_VENV = Path("/tmp/crl-venv")

# pqn.py's defaults, which are CleanRL's pqn.py's; both sides get them as flags.
PQN = dict(
    num_envs=4,
    num_steps=128,
    learning_rate=2.5e-4,
    gamma=0.99,
    q_lambda=0.65,
    num_minibatches=4,
    update_epochs=4,
    max_grad_norm=10.0,
    start_e=1.0,
    end_e=0.05,
    exploration_fraction=0.5,
)
# pqn_atari_envpool.py's defaults (CleanRL's); the LSTM variant clips the gradient norm at 0.5.
PQN_ATARI = dict(PQN, num_envs=8, end_e=0.01, exploration_fraction=0.1)
PQN_ATARI_LSTM = dict(PQN_ATARI, max_grad_norm=0.5)
# qrdqn.py's defaults: dqn.py's (as speed.py gives them to SB3's DQN) with 50 quantiles; SB3-contrib gets the same.
QRDQN = dict(DQN, n_quantiles=50)

PUBLISHED_PQN = dict(
    source="CleanRL, docs/rl-algorithms/pqn.md ('Experiment results' of pqn.py, commit fe8d8a0): "
    "mean ± std over 3 seeds of charts/episodic_return as openrlbenchmark's rlops table gives it, 500k steps",
    returns={
        "CartPole-v1": dict(mean=495.13, std=6.89),
        "Acrobot-v1": dict(mean=-95.63, std=5.73),
        "MountainCar-v0": dict(mean=-200.00, std=0.00),
    },
)

NOT_MATCHED_PQN = [
    "Time-limit truncation (all three classic envs, and Atari's 108k-frame limit): ours bootstraps from "
    "max_a Q(real final observation); CleanRL's treats a truncation as a termination.",
    "Random streams: the same --seed draws different actions and minibatches on the two sides.",
    "Minibatch order: ours draws a torch.randperm, CleanRL's np.random.shuffle. Ours runs RAdam and "
    "clip_grad_norm_ with foreach=True: the same update, float rounding aside.",
]
NOT_MATCHED_PQN_ATARI = NOT_MATCHED_PQN + [
    "EnvPool: ours 1.2.5 with env_type='gymnasium' (this repository's), CleanRL's 0.8.4 with env_type='gym' "
    "and gym 0.23.1 (its scripts need that API; 'envpool_raw' in the speed json measures the two alone).",
    "EnvPool's reset step after a done: ours masks it out of the loss, CleanRL's trains on it.",
    "EnvPool threads: CleanRL's gets EnvPool's default, min(num_envs, CPU count); ours is given the same "
    "number with --num-threads.",
]
NOT_MATCHED_PQN_LSTM = NOT_MATCHED_PQN_ATARI + [
    "LSTM state reset: ours where an episode's first observation comes (after the reset step); CleanRL's "
    "one step earlier, at the final observation.",
]
NOT_MATCHED_QRDQN = [
    "Before --learning-starts, SB3 acts uniformly at random; ours acts ε-greedily from the first step "
    "(ε follows the same linear schedule on both sides afterwards).",
    "Target network: SB3 copies it every 500 env steps from the first step, ours every 500 steps once "
    "training has started (the same weights before it); the phase differs by one step.",
    "Random streams and network initialisation draws differ (both PyTorch's default init, 120-84 ReLU, "
    "Adam with eps 0.01/batch size, no gradient clipping: SB3's max_grad_norm=None).",
    "Replay: both keep the real final observation of a truncated episode and bootstrap from it "
    "(SB3's handle_timeout_termination); ours samples with its own generator.",
    "SB3 sees the env through Monitor and DummyVecEnv; ours through a same-step-autoreset vector env of 1.",
]

SB3_QRDQN = """
import json, sys, time, torch, gymnasium as gym
from sb3_contrib import QRDQN
from stable_baselines3.common.monitor import Monitor
h, env_id, steps, seed, threads = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
env = Monitor(gym.make(env_id))
model = QRDQN("MlpPolicy", env, learning_rate=h["learning_rate"], buffer_size=h["buffer_size"],
              learning_starts=h["learning_starts"], batch_size=h["batch_size"], tau=h["tau"], gamma=h["gamma"],
              train_freq=h["train_frequency"], gradient_steps=1, target_update_interval=h["target_network_frequency"],
              exploration_fraction=h["exploration_fraction"], exploration_initial_eps=h["start_e"],
              exploration_final_eps=h["end_e"], max_grad_norm=None,
              policy_kwargs=dict(n_quantiles=h["n_quantiles"], net_arch=[120, 84],
                                 optimizer_kwargs=dict(eps=0.01 / h["batch_size"])),
              seed=seed, device="cpu", verbose=0)
start = time.perf_counter()
model.learn(steps)
sps = model.num_timesteps / (time.perf_counter() - start)
print("RESULT " + json.dumps(dict(sps=sps, steps=model.num_timesteps, returns=[float(r) for r in env.get_episode_rewards()])))
"""

# EnvPool alone, random actions, as each side's script makes it (8 envs, episodic life, clipped rewards).
ENVPOOL_RAW = (
    """
import json, sys, time, numpy as np, envpool
env_type, num_envs, num_threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
envs = envpool.make("%s", env_type=env_type, num_envs=num_envs, num_threads=num_threads, episodic_life=True,
                    reward_clip=True, seed=1)
envs.reset()
rng = np.random.default_rng(1)
actions = rng.integers(envs.action_space.n, size=(steps // num_envs, num_envs))
start = time.perf_counter()
for a in actions:
    envs.step(a)
sps = len(actions) * num_envs / (time.perf_counter() - start)
print("RESULT " + json.dumps(dict(sps=sps, steps=len(actions) * num_envs, envpool=envpool.__version__)))
"""
    % ATARI_ENV
)


@dataclass
class Job:
    """One training run: who runs what, and how its output is read."""

    side: str  # "ours", "cleanrl" or "sb3-contrib" (or an EnvPool version for envpool_raw)
    script: str
    env_id: str
    seed: int
    steps: int  # the steps the run trains (rollouts round total_timesteps down)
    command: list[str]
    reads: str  # "ours", "cleanrl" or "result" (a RESULT json line)

    @property
    def slug(self) -> str:
        return f"{self.side}-{self.script.removesuffix('.py')}-{self.env_id}-{self.seed}"


LIVE: set[int] = set()  # process groups of the runs in flight, ended if the benchmark is stopped
LIVE_LOCK = threading.RLock()
STOPPING = threading.Event()
SO_FAR: dict = dict(path=None, runs=[])  # the json being written and the runs finished so far


def flags(hyperparameters: dict) -> list[str]:
    return [f"--{key.replace('_', '-')}={value}" for key, value in hyperparameters.items()]


def child_env() -> dict:
    """The environment of every run: one OpenMP/MKL thread, unbuffered output."""
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def tensorboard(cwd: Path) -> dict[str, list[tuple[int, float]]]:
    """``charts/episodic_return`` and ``charts/SPS`` of the one TensorBoard run under ``cwd/runs``: [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    directories = sorted({path.parent for path in cwd.glob("runs/*/events.out.tfevents.*")})
    if len(directories) != 1:
        raise RuntimeError(f"expected one TensorBoard run under {cwd / 'runs'}, found {len(directories)}")
    accumulator = EventAccumulator(str(directories[0]), size_guidance={"scalars": 0})
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    return {
        tag: [(event.step, float(event.value)) for event in accumulator.Scalars(tag)] if tag in tags else []
        for tag in ("charts/episodic_return", "charts/SPS")
    }


def training_sps(job: Job, output: str, scalars: dict) -> tuple[float, str]:
    """Steps per second of the training loop as the run reports it, and where it was read.

    Ours: ``charts/SPS`` when written at the last step (the PQN scripts write it after each update,
    where CleanRL prints its ``SPS:``), else the final progress line (which stands at the last env
    step: a rollout's update after it is not counted). CleanRL: its last ``SPS:`` line.
    """
    if job.reads == "cleanrl":
        return float(re.findall(r"^SPS: (\d+)", output, re.M)[-1]), "last 'SPS:' line"
    written = scalars["charts/SPS"]
    if written and written[-1][0] >= job.steps:
        return written[-1][1], "charts/SPS at the last step"
    return float(re.findall(r"\| SPS (\d+) \|", output)[-1]), "final progress line"


def run_job(job: Job, core: int, work: Path, nice: int) -> dict:
    """Run ``job`` pinned to ``core`` in its own folder under ``work``; its measurements as a dict."""
    cwd = work / job.slug
    shutil.rmtree(cwd, ignore_errors=True)
    cwd.mkdir(parents=True)
    command = ["taskset", "-c", str(core), *(["nice", "-n", str(nice)] if nice else []), *job.command]
    result = dict(side=job.side, script=job.script, env_id=job.env_id, seed=job.seed, steps=job.steps, core=core)
    print(f"start {job.slug} on core {core}", flush=True)
    start = time.perf_counter()
    with open(cwd / "output.log", "w") as log:
        with LIVE_LOCK:  # no new run once the benchmark is stopping
            if STOPPING.is_set():
                raise RuntimeError("stopped")
            process = subprocess.Popen(
                command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True
            )
            LIVE.add(process.pid)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        with LIVE_LOCK:
            LIVE.discard(process.pid)
    result.update(wall_s=round(time.perf_counter() - start, 2), cpu_s=round(usage.ru_utime + usage.ru_stime, 2))
    result["returncode"] = process.returncode
    output = (cwd / "output.log").read_text(errors="replace")
    try:
        if process.returncode != 0:
            raise RuntimeError(f"exit {process.returncode}")
        if job.reads == "result":
            reported = json.loads(re.findall(r"^RESULT (.*)$", output, re.M)[-1])
            result["sps"], returns = reported["sps"], reported.get("returns")
            result["steps"] = reported["steps"]
            if "envpool" in reported:
                result["envpool"] = reported["envpool"]
            result["sps_from"] = "model.learn's wall time" if "returns" in reported else "the stepping loop"
        else:
            scalars = tensorboard(cwd)
            result["sps"], result["sps_from"] = training_sps(job, output, scalars)
            returns = [value for _, value in scalars["charts/episodic_return"]]
    except (RuntimeError, IndexError, KeyError, ValueError) as error:
        result["error"] = f"{error}; last lines: " + " | ".join(output.strip().splitlines()[-5:])
        print(f"FAILED {job.slug}: {result['error']}", flush=True)
        return result
    result["process_sps"] = round(result["steps"] / result["wall_s"], 1)
    if returns is not None:
        result.update(
            episodes=len(returns),
            last20_mean=float(np.mean(returns[-20:])) if returns else None,
            curve_mean=float(np.mean(returns)) if returns else None,
        )
    shown = f", last-20 return {result['last20_mean']:.1f}" if result.get("last20_mean") is not None else ""
    print(f"done  {job.slug}: {result['sps']:.0f} SPS, {result['wall_s']:.0f} s wall{shown}", flush=True)
    return result


def run_all(jobs: list[Job], cores: list[int], work: Path, nice: int) -> list[dict]:
    """Run ``jobs`` in order, ``len(cores)`` at a time, each pinned to a core no other run holds.

    Each finished run is also added to the partial record (see :data:`SO_FAR`), so a benchmark
    stopped halfway keeps what it measured."""
    free, lock = list(cores), threading.Lock()

    def one(job: Job) -> dict:
        with lock:
            core = free.pop(0)
        try:
            result = run_job(job, core, work, nice)
        except Exception as error:  # one broken run must not lose the others
            result = dict(side=job.side, script=job.script, env_id=job.env_id, seed=job.seed, error=repr(error))
            print(f"FAILED {job.slug}: {error!r}", flush=True)
        with lock:
            free.append(core)
            SO_FAR["runs"].append(result)
            if SO_FAR["path"] is not None:
                partial = dict(complete=False, command=" ".join(sys.argv[1:]), runs=SO_FAR["runs"])
                SO_FAR["path"].write_text(json.dumps(partial, indent=2) + "\n")
        return result

    pool = ThreadPoolExecutor(max_workers=len(cores))
    try:
        return list(pool.map(one, jobs))
    except BaseException:  # Ctrl-C or SIGTERM: no new run, the running ones ended
        end_live_runs()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def end_live_runs(*_) -> None:
    """End every run in flight (its whole process group) and start no other."""
    with LIVE_LOCK:
        STOPPING.set()
        for pid in LIVE:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    if _:  # called as a signal handler
        raise SystemExit(143)


def dataclass_defaults(path: Path) -> dict:
    """The literal defaults of the ``Args`` dataclass in the script at ``path`` (read, not imported)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == "Args":
            defaults = {}
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and statement.value is not None:
                    try:
                        defaults[statement.target.id] = ast.literal_eval(statement.value)
                    except (ValueError, TypeError, SyntaxError):
                        pass
            return defaults
    return {}


def differing_defaults(path: Path, hyperparameters: dict) -> dict:
    """Fields of ``hyperparameters`` whose value is not the default of the script at ``path``."""
    defaults = dataclass_defaults(path)
    return {
        key: dict(script=defaults.get(key), here=value) for key, value in hyperparameters.items() if defaults.get(key) != value
    }


def our_script(name: str) -> Path:
    return ROOT / "cleanrl" / name


def ours(name: str, env_id: str, seed: int, steps: int, hyperparameters: dict, extra: list[str] = ()) -> Job:
    command = [sys.executable, str(our_script(name)), f"--env-id={env_id}", f"--seed={seed}", f"--total-timesteps={steps}"]
    command += ["--torch-threads=1", *flags(hyperparameters), *extra]
    return Job("ours", name, env_id, seed, trained(steps, hyperparameters), command, "ours")


def cleanrl(args, name: str, env_id: str, seed: int, steps: int, hyperparameters: dict) -> Job:
    command = [str(args.peer_python), str(args.peer_scripts / name), f"--env-id={env_id}", f"--seed={seed}"]
    command += [f"--total-timesteps={steps}", *flags(hyperparameters)]
    return Job("cleanrl", name, env_id, seed, trained(steps, hyperparameters), command, "cleanrl")


def sb3_qrdqn(env_id: str, seed: int, steps: int, hyperparameters: dict) -> Job:
    command = [sys.executable, "-c", SB3_QRDQN, json.dumps(hyperparameters), env_id, str(steps), str(seed), "1"]
    return Job("sb3-contrib", "QRDQN", env_id, seed, steps, command, "result")


def trained(steps: int, hyperparameters: dict) -> int:
    """Steps a run of ``steps`` trains: whole rollouts of num_envs x num_steps for PQN, else all of them."""
    rollout = hyperparameters["num_envs"] * hyperparameters.get("num_steps", 1)
    return steps // rollout * rollout


def check_peer(args) -> None:
    if not (args.peer_python.exists() and (args.peer_scripts / "pqn.py").exists()):
        sys.exit(
            f"error: --peer-python/--peer-scripts: {args.peer_python} or {args.peer_scripts} is missing; run: "
            f"bash benchmark/scripts/peer_venv.sh {args.peer_python.parent.parent} /path/to/cleanrl"
        )


def versions(python: Path | str, modules: list[str]) -> dict:
    """``module.__version__`` of each of ``modules`` under the interpreter ``python``."""
    program = "import importlib, json, sys\nout = {}\nfor m in sys.argv[1:]:\n    try:\n"
    program += "        out[m] = importlib.import_module(m).__version__\n    except Exception as e:\n"
    program += "        out[m] = f'not importable ({type(e).__name__})'\nprint(json.dumps(out))"
    out = subprocess.run([str(python), "-c", program, *modules], capture_output=True, text=True, env=child_env())
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}


def meta(args, scripts: list[str], peer: bool, sb3: bool) -> dict:
    """Where and with what the numbers were measured."""
    info = provenance.describe()
    paths = [str(our_script(name).relative_to(ROOT)) for name in scripts]
    info.update(
        command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        uncommitted=provenance.git("status", "--porcelain", "--", *paths).splitlines(),
        cores=args.cores,
        nice=args.nice,
        torch_threads=1,
        omp_num_threads=1,
        ours=versions(sys.executable, ["torch", "gymnasium", "numpy"] + (["envpool"] if "atari" in "".join(scripts) else [])),
    )
    if sb3:
        info["sb3"] = versions(sys.executable, ["sb3_contrib", "stable_baselines3"])
    if peer:
        commit_file = args.peer_scripts / "COMMIT"
        info["cleanrl_commit"] = commit_file.read_text().strip() if commit_file.exists() else "unknown"
        info["peer"] = versions(args.peer_python, ["torch", "gymnasium", "gym", "envpool", "numpy", "tyro"])
    return info


def summarise(runs: list[dict]) -> dict:
    """Per side and env: mean and std (numpy's, ddof 0) over seeds of the last-20 and whole-curve means."""
    summary: dict = {}
    for run in runs:
        if run.get("last20_mean") is not None:
            summary.setdefault(run["side"], {}).setdefault(run["env_id"], []).append(run)
    table = {}
    for side, by_env in summary.items():
        for env_id, group in by_env.items():
            last, curve = [r["last20_mean"] for r in group], [r["curve_mean"] for r in group]
            table.setdefault(side, {})[env_id] = dict(
                seeds=[r["seed"] for r in group],
                last20_mean=float(np.mean(last)),
                last20_std=float(np.std(last)),
                curve_mean=float(np.mean(curve)),
                curve_std=float(np.std(curve)),
                wall_s_mean=float(np.mean([r["wall_s"] for r in group])),
            )
            print(
                f"{side:12s} {env_id:15s} last-20 {np.mean(last):8.2f} ± {np.std(last):6.2f}  "
                f"curve {np.mean(curve):8.2f}  ({len(group)} seeds)"
            )
    return table


def write(record: dict, failed: bool) -> None:
    """The complete record, in place of the partial one."""
    path = SO_FAR["path"]
    path.write_text(json.dumps(dict(complete=True, **record), indent=2) + "\n")
    print(f"wrote {path}" + (" (some runs failed: see 'error' in their entries)" if failed else ""))


def returns(args, work: Path, script: str, hyper: dict, peer, extra: dict) -> None:
    """Our ``script`` (and ``peer(env_id, seed)``'s run beside each of its runs) on ``args.envs`` x ``args.seeds``."""
    jobs = []
    for env_id in args.envs:
        for seed in args.seeds:  # ours and the peer's of one env and seed side by side
            jobs.append(ours(script, env_id, seed, args.total_timesteps, hyper))
            if peer is not None:
                jobs.append(peer(env_id, seed))
    runs = run_all(jobs, args.cores, work, args.nice)
    record = dict(
        meta=meta(args, [script], "cleanrl" in jobs[-1].side, "sb3" in jobs[-1].side),
        total_timesteps=args.total_timesteps,
        hyperparameters=hyper,
        differs_from_script_defaults=differing_defaults(our_script(script), hyper),
        **extra,
        summary=summarise(runs),
        runs=runs,
    )
    write(record, any("error" in r for r in runs))


def cmd_returns_pqn(args, work: Path) -> None:
    peer = (lambda env_id, seed: cleanrl(args, "pqn.py", env_id, seed, args.total_timesteps, PQN)) if args.peer else None
    returns(args, work, "pqn.py", PQN, peer, dict(published=PUBLISHED_PQN, not_matched=NOT_MATCHED_PQN if args.peer else []))


def cmd_returns_qrdqn(args, work: Path) -> None:
    hyper = dict(QRDQN, learning_starts=args.learning_starts)

    def peer(env_id: str, seed: int) -> Job:
        return sb3_qrdqn(env_id, seed, args.total_timesteps, hyper)

    returns(args, work, "qrdqn.py", hyper, peer, dict(not_matched=NOT_MATCHED_QRDQN))


SCRIPTS = {
    "pqn": "pqn.py",
    "pqn_atari": "pqn_atari_envpool.py",
    "pqn_atari_lstm": "pqn_atari_envpool_lstm.py",
    "qrdqn": "qrdqn.py",
}


def defaults_check(args, name: str | None, hyperparameters: dict, peer: bool) -> dict:
    """Which of the flags both sides get are not the defaults of our script (and of CleanRL's, ``peer``)."""
    if name is None:
        return {}
    checked = dict(ours=differing_defaults(our_script(name), hyperparameters))
    if peer:
        checked["cleanrl"] = differing_defaults(args.peer_scripts / name, hyperparameters)
    return checked


def envpool_threads(num_envs: int) -> int:
    """EnvPool's default thread count (num_threads=0): min(num_envs, the machine's CPU count)."""
    return min(num_envs, os.cpu_count() or 1)


def atari_pair(args, name: str, hyper: dict, steps: int, seed: int) -> tuple[Job, Job]:
    threads = [f"--num-threads={envpool_threads(hyper['num_envs'])}"]
    return (ours(name, ATARI_ENV, seed, steps, hyper, threads), cleanrl(args, name, ATARI_ENV, seed, steps, hyper))


def cmd_speed(args, work: Path) -> None:
    pairs, hypers, notes, peer_names = {}, {}, {}, {}
    if "pqn" in args.algos:
        pairs["pqn"] = (
            ours("pqn.py", "CartPole-v1", args.seed, args.total_timesteps, PQN),
            cleanrl(args, "pqn.py", "CartPole-v1", args.seed, args.total_timesteps, PQN),
        )
        hypers["pqn"], notes["pqn"], peer_names["pqn"] = PQN, NOT_MATCHED_PQN, "CleanRL pqn.py"
    for algo, name, hyper, note in [
        ("pqn_atari", "pqn_atari_envpool.py", PQN_ATARI, NOT_MATCHED_PQN_ATARI),
        ("pqn_atari_lstm", "pqn_atari_envpool_lstm.py", PQN_ATARI_LSTM, NOT_MATCHED_PQN_LSTM),
    ]:
        if algo in args.algos:
            pairs[algo] = atari_pair(args, name, hyper, args.atari_timesteps, args.seed)
            hypers[algo], notes[algo], peer_names[algo] = hyper, note, f"CleanRL {name}"
    if "qrdqn" in args.algos:
        hyper = dict(QRDQN, learning_starts=args.learning_starts)
        pairs["qrdqn"] = (
            ours("qrdqn.py", "CartPole-v1", args.seed, args.qrdqn_timesteps, hyper),
            sb3_qrdqn("CartPole-v1", args.seed, args.qrdqn_timesteps, hyper),
        )
        hypers["qrdqn"], notes["qrdqn"], peer_names["qrdqn"] = hyper, NOT_MATCHED_QRDQN, "SB3-contrib QRDQN"
    if "envpool_raw" in args.algos:  # the emulators alone: this repository's EnvPool and the peer venv's
        threads, num_envs = envpool_threads(PQN_ATARI["num_envs"]), PQN_ATARI["num_envs"]

        def raw(env_type: str) -> list[str]:  # each side's EnvPool with the API its scripts use
            return ["-c", ENVPOOL_RAW, env_type, str(num_envs), str(threads), str(args.envpool_steps)]

        pairs["envpool_raw"] = (
            Job("ours", "envpool", ATARI_ENV, 1, args.envpool_steps, [sys.executable, *raw("gymnasium")], "result"),
            Job("cleanrl", "envpool", ATARI_ENV, 1, args.envpool_steps, [str(args.peer_python), *raw("gym")], "result"),
        )
        hypers["envpool_raw"] = dict(num_envs=num_envs, num_threads=threads, actions="uniform random")
        notes["envpool_raw"], peer_names["envpool_raw"] = ["EnvPool alone: no network, no training."], "peer venv's EnvPool"

    results = {}
    core = args.cores[-1:]
    for algo, (our_job, peer_job) in pairs.items():
        ours_runs, peer_runs = [], []
        for repeat in range(args.repeats):  # ours, peer, ours, peer ...
            ours_runs.append(run_all([our_job], core, work, args.nice)[0])
            peer_runs.append(run_all([peer_job], core, work, args.nice)[0])
        ok = [(o, p) for o, p in zip(ours_runs, peer_runs) if "error" not in o and "error" not in p]
        ratios = [o["sps"] / p["sps"] for o, p in ok]
        results[algo] = dict(
            env_id=our_job.env_id,
            steps=our_job.steps,
            peer=peer_names[algo],
            hyperparameters=hypers[algo],
            ours_sps=[r.get("sps") for r in ours_runs],
            peer_sps=[r.get("sps") for r in peer_runs],
            ratios=ratios,
            ratio_median=statistics.median(ratios) if ratios else None,
            ours_process_sps=[r.get("process_sps") for r in ours_runs],
            peer_process_sps=[r.get("process_sps") for r in peer_runs],
            process_ratio_median=statistics.median(o["process_sps"] / p["process_sps"] for o, p in ok) if ok else None,
            differs_from_script_defaults=defaults_check(args, SCRIPTS.get(algo), hypers[algo], algo != "qrdqn"),
            not_matched=notes[algo],
            runs=ours_runs + peer_runs,
        )
        if ratios:
            print(
                f"{algo}: ours {statistics.median(r['sps'] for r, _ in ok):.0f} SPS, {peer_names[algo]} "
                f"{statistics.median(p['sps'] for _, p in ok):.0f} SPS, ratio ours/peer (median of {len(ratios)} pairs) "
                f"{statistics.median(ratios):.2f}",
                flush=True,
            )
    record = dict(
        meta=meta(args, [SCRIPTS[a] for a in args.algos if a in SCRIPTS], True, "qrdqn" in args.algos),
        measure="sps: steps per second over each side's training loop, from its first env step to its end (ours: "
        "charts/SPS written after the last update for PQN, the final progress line for QR-DQN; CleanRL: its last "
        "'SPS:' line, printed after the last update; SB3: steps over model.learn's wall time; EnvPool alone: "
        "the stepping loop); sps_from in each run says which; process_sps: steps over the whole process's wall "
        "time (start-up included); ratios: ours / peer per alternating pair; ratio_median: their median",
        repeats=args.repeats,
        results=results,
    )
    failed = any("error" in run for result in results.values() for run in result["runs"])
    write(record, failed)


def cmd_breakout(args, work: Path) -> None:
    jobs, names = [], []
    for seed in args.seeds:
        for name, hyper in [("pqn_atari_envpool.py", PQN_ATARI), ("pqn_atari_envpool_lstm.py", PQN_ATARI_LSTM)]:
            if name.removesuffix(".py") in args.scripts:
                jobs.extend(atari_pair(args, name, hyper, args.total_timesteps, seed))  # ours, then CleanRL's
                names.append(name)
    runs = run_all(jobs, args.cores, work, args.nice)
    by_script = {}
    for run in runs:
        by_script.setdefault(run["script"], {}).setdefault(run["side"], []).append(run)
    for script, sides in by_script.items():
        for side, group in sides.items():
            good = [r for r in group if r.get("last20_mean") is not None]
            if good:
                print(
                    f"{script:28s} {side:8s} last-20 {np.mean([r['last20_mean'] for r in good]):7.2f}  "
                    f"SPS {np.mean([r['sps'] for r in good]):6.0f}  ({len(good)} seeds)"
                )
    record = dict(
        meta=meta(args, sorted(set(names)), True, False),
        total_timesteps=args.total_timesteps,
        hyperparameters={"pqn_atari_envpool.py": PQN_ATARI, "pqn_atari_envpool_lstm.py": PQN_ATARI_LSTM},
        differs_from_script_defaults={
            "pqn_atari_envpool.py": defaults_check(args, "pqn_atari_envpool.py", PQN_ATARI, True),
            "pqn_atari_envpool_lstm.py": defaults_check(args, "pqn_atari_envpool_lstm.py", PQN_ATARI_LSTM, True),
        },
        envpool_threads=envpool_threads(PQN_ATARI["num_envs"]),
        measure="last20_mean: mean charts/episodic_return (game score, all lives, unclipped on both sides) of the "
        "last 20 episodes, curve_mean: of all; sps: each side's training-loop steps per second, as in speed_issue30.json "
        "(sps_from says where it was read); process_sps: steps over the whole process's wall time",
        not_matched={"pqn_atari_envpool.py": NOT_MATCHED_PQN_ATARI, "pqn_atari_envpool_lstm.py": NOT_MATCHED_PQN_LSTM},
        published_10M_steps=dict(
            source="CleanRL docs/rl-algorithms/pqn.md (commit fe8d8a0), at 10M steps, not comparable with a short run",
            returns={
                "pqn_atari_envpool.py": dict(mean=384.85, std=12.39),
                "pqn_atari_envpool_lstm.py": dict(mean=400.35, std=9.08),
            },
        ),
        runs=runs,
    )
    write(record, any("error" in r for r in runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", type=Path, help="write the record here instead of benchmark/results/<topic>/<name>.json")
    common.add_argument("--runs-dir", type=Path, help="keep every run's folder (TensorBoard events, output.log) here")
    common.add_argument("--nice", type=int, default=0, help="niceness of the runs (0: as is)")
    common.add_argument("--peer-python", type=Path, default=PEER_VENV / "bin" / "python", help="the peer venv's python")
    common.add_argument("--peer-scripts", type=Path, default=PEER_VENV / "cleanrl_peer", help="CleanRL's three scripts")
    parallel = argparse.ArgumentParser(add_help=False)
    parallel.add_argument("--jobs", type=int, default=1, help="runs at a time, each pinned to its own core")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("returns-pqn", parents=[common, parallel], help="pqn.py's returns on classic control")
    p.add_argument("--total-timesteps", type=int, default=500_000)
    p.add_argument("--envs", nargs="+", default=CLASSIC)
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--peer", action="store_true", help="also run CleanRL's pqn.py at the same envs and seeds")

    p = sub.add_parser("returns-qrdqn", parents=[common, parallel], help="qrdqn.py and SB3-contrib QRDQN's returns")
    p.add_argument("--total-timesteps", type=int, default=100_000)
    p.add_argument("--envs", nargs="+", default=CLASSIC)
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--learning-starts", type=int, default=QRDQN["learning_starts"], help="both sides (short checks)")

    p = sub.add_parser("speed", parents=[common], help="alternating pairs, pinned to one core")
    p.add_argument(
        "--algos",
        nargs="+",
        default=["pqn", "pqn_atari", "pqn_atari_lstm", "qrdqn", "envpool_raw"],
        choices=["pqn", "pqn_atari", "pqn_atari_lstm", "qrdqn", "envpool_raw"],
    )
    p.add_argument("--repeats", type=int, default=3, help="alternating pairs per algorithm")
    p.add_argument("--total-timesteps", type=int, default=100_000, help="steps of the pqn.py pair")
    p.add_argument("--atari-timesteps", type=int, default=8192, help="steps of the Atari pairs")
    p.add_argument("--qrdqn-timesteps", type=int, default=50_000, help="steps of the QR-DQN pair")
    p.add_argument("--envpool-steps", type=int, default=40_000, help="steps of EnvPool alone")
    p.add_argument("--learning-starts", type=int, default=QRDQN["learning_starts"], help="of the QR-DQN pair")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--core", type=int, default=1, help="the core every run is pinned to")

    p = sub.add_parser("breakout", parents=[common, parallel], help="Breakout-v5 returns and speed, ours and CleanRL's")
    p.add_argument("--total-timesteps", type=int, default=200_000)
    p.add_argument("--seeds", nargs="+", type=int, default=[1])
    p.add_argument(
        "--scripts",
        nargs="+",
        default=["pqn_atari_envpool", "pqn_atari_envpool_lstm"],
        choices=["pqn_atari_envpool", "pqn_atari_envpool_lstm"],
    )
    args = parser.parse_args()

    available = sorted(os.sched_getaffinity(0))
    if args.command == "speed":
        if args.core not in available:
            parser.error(f"--core: {args.core} is not among this process's cores {available}")
        args.cores = [args.core]
    else:
        if not 1 <= args.jobs <= len(available):
            parser.error(f"--jobs: must be in [1, {len(available)}] (one core per run), got {args.jobs}")
        args.cores = available[-args.jobs :]
    needs_peer = args.command == "breakout" or getattr(args, "peer", False)
    if needs_peer or (args.command == "speed" and set(args.algos) != {"qrdqn"}):
        check_peer(args)
    signal.signal(signal.SIGTERM, end_live_runs)
    default = {
        "returns-pqn": "classic_control/pqn_returns",
        "returns-qrdqn": "classic_control/qrdqn_vs_sb3_contrib_returns",
        "speed": "speed/pqn_vs_cleanrl",
    }
    name = default.get(args.command, "atari/breakout_200k_pqn_vs_cleanrl")
    SO_FAR["path"] = args.json or ROOT / "benchmark" / "results" / f"{name}.json"
    work = args.runs_dir or Path(tempfile.mkdtemp(prefix="value_breadth-"))
    work.mkdir(parents=True, exist_ok=True)
    command = {
        "returns-pqn": cmd_returns_pqn,
        "returns-qrdqn": cmd_returns_qrdqn,
        "speed": cmd_speed,
        "breakout": cmd_breakout,
    }
    try:
        command[args.command](args, work)
    except BaseException:
        if SO_FAR["runs"]:
            print(f"stopped: the {len(SO_FAR['runs'])} runs that ended are in {SO_FAR['path']}", flush=True)
        raise
    finally:
        end_live_runs()
        if args.runs_dir is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"runs kept in {work}")


if __name__ == "__main__":
    main()
