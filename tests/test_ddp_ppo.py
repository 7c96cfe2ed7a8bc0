"""Data-parallel PPO (ddp_ppo.py): two ranks on CPU with gloo, launched by torchrun, on CartPole-v1.

The collective helpers against their single-process definitions (2 spawned ranks); ranks that
stay identical (``--check-params-every``), an agreed ``--target-kl`` early stop without a hang,
a two-"node" run through torchrun's c10d rendezvous on localhost with one run directory and
the episodes of both ranks in it, SIGTERM to the torchrun process group then ``--resume``
(equal to an uninterrupted run; another world size refused), a plain one-process run, bad
input, and a learning test at ppo.py's global batch (2 ranks x 2 envs x 128 steps).
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cleanrl_utils.files import checkpoint_step, checkpoints
from tests.conftest import (
    ROOT,
    assert_stops_with_one_line,
    episodic_returns,
    run_dir,
    run_script,
    scalars,
)

SCRIPT = str(ROOT / "cleanrl" / "ddp_ppo.py")
CARTPOLE = ["--env-id", "CartPole-v1", "--clip-coef", "0.2", "--num-envs", "2"]  # ppo.py's clip
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("WANDB_API_KEY", None)


def torchrun(
    *flags: str, cwd: Path, nproc: int = 2, timeout: float = 300, launcher: list[str] | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --standalone --nproc-per-node nproc ddp_ppo.py flags`` in ``cwd``."""
    launcher = launcher or ["--standalone", "--nproc-per-node", str(nproc)]
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", *launcher, SCRIPT, *flags],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"torchrun exited {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---- the collective helpers, in 2 spawned ranks


def _helpers_in_rank(rank: int, store_file: str, results) -> None:
    sys.path.insert(0, str(ROOT))
    import importlib.util

    spec = importlib.util.spec_from_file_location("ddp_ppo", SCRIPT)
    ddp_ppo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ddp_ppo)
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2)
    x = torch.arange(10, dtype=torch.float32) ** 1.5  # the global minibatch; rank r holds x[5r : 5r + 5]
    normalized = ddp_ppo.global_normalize(x[5 * rank : 5 * rank + 5])
    agreed = ddp_ppo.agree(rank == 1, False)
    kl = ddp_ppo.mean_over_ranks(torch.tensor(float(rank + 1)))
    net = torch.nn.Linear(3, 2)
    with torch.no_grad():
        for p in net.parameters():
            p.fill_(0.5)
    same = ddp_ppo.param_divergence(net)
    if rank == 1:
        with torch.no_grad():
            net.bias[1] += 0.25
    different = ddp_ppo.param_divergence(net)
    results[rank] = (normalized.tolist(), agreed, float(kl), same, different)
    dist.destroy_process_group()


def test_collective_helpers_match_their_one_process_definitions(tmp_path):
    """Advantages normalised over the samples of both ranks as ppo.py normalises one minibatch;
    any rank's flag stops both; the KL is the mean over ranks; a parameter differing on one rank
    is found (the check of --check-params-every can fail)."""
    manager = mp.get_context("spawn").Manager()
    results = manager.dict()
    mp.spawn(_helpers_in_rank, args=(str(tmp_path / "store"), results), nprocs=2, join=True)
    x = torch.arange(10, dtype=torch.float32) ** 1.5
    expected = ((x - x.mean()) / (x.std() + 1e-8)).tolist()
    for rank in (0, 1):
        normalized, agreed, kl, same, different = results[rank]
        np.testing.assert_allclose(normalized, expected[5 * rank : 5 * rank + 5], rtol=1e-6, atol=1e-6)
        assert agreed == [1, 0]
        assert kl == 1.5
        assert same == 0.0 and different == 0.25


# ---- two ranks under torchrun


def test_ranks_hold_identical_parameters_and_rank0_logs_every_rank(tmp_path):
    """Parameters compared every 2 updates (and after the last) are equal on both ranks; one run
    directory; the episodes of both ranks are in rank 0's logs."""
    result = torchrun(*CARTPOLE, "--total-timesteps", "4096", "--check-params-every", "2", cwd=tmp_path)
    assert "2 rank(s), backend gloo; global batch 512 = 2 x 2 envs x 128 steps" in result.stdout
    tags = scalars(run_dir(tmp_path))  # exactly one run directory: rank 0's
    assert tags["charts/param_divergence"] == [(step, 0.0) for step in (1024, 2048, 3072, 4096)]
    assert [step for step, _ in tags["losses/value_loss"]] == list(range(512, 4097, 512))
    _assert_episodes_of_both_ranks(tags, 4096)


def _assert_episodes_of_both_ranks(tags: dict, global_steps: int) -> None:
    """Each rank's episode count is logged, they add up to the logged episodes, and the logged
    episodes' lengths cover more steps than one rank took (so both ranks' episodes are there)."""
    counts = [tags[f"ranks/episodes_rank{rank}"][-1][1] for rank in (0, 1)]
    lengths = [value for _, value in tags["charts/episodic_length"]]
    assert min(counts) > 0 and sum(counts) == len(lengths) == len(tags["charts/episodic_return"])
    assert global_steps // 2 < sum(lengths) <= global_steps


def test_target_kl_early_stop_is_agreed_without_a_hang(tmp_path):
    """A tiny --target-kl ends the epochs of some updates early; the ranks agree (no hang within
    the timeout) and stay identical."""
    torchrun(
        *CARTPOLE, "--total-timesteps", "4096", "--target-kl", "1e-4", "--check-params-every", "1", cwd=tmp_path, timeout=240
    )
    tags = scalars(run_dir(tmp_path))
    epochs = [value for _, value in tags["losses/epochs"]]
    assert len(epochs) == 8 and min(epochs) < 4, epochs
    assert all(value == 0.0 for _, value in tags["charts/param_divergence"])


def test_two_nodes_through_the_c10d_rendezvous(tmp_path):
    """Two torchrun launchers of one process each, meeting at a c10d rendezvous on localhost: both
    exit 0, and only the launcher that got rank 0 has a run directory."""
    port, nodes = free_port(), []
    for node in ("a", "b"):
        (tmp_path / node).mkdir()
        launcher = [
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{port}",
            "--rdzv-id",
            "ddp-test",
        ]
        nodes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    *launcher,
                    SCRIPT,
                    *CARTPOLE,
                    "--total-timesteps",
                    "2048",
                    "--check-params-every",
                    "4",
                ],
                cwd=tmp_path / node,
                env=ENV,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [process.communicate(timeout=300) for process in nodes]
    assert [process.returncode for process in nodes] == [0, 0], outputs
    with_runs = [node for node in ("a", "b") if (tmp_path / node / "runs").exists()]
    assert len(with_runs) == 1
    tags = scalars(run_dir(tmp_path / with_runs[0]))
    assert tags["charts/param_divergence"] == [(2048, 0.0)]
    _assert_episodes_of_both_ranks(tags, 2048)


RESUMED = [
    *CARTPOLE,
    "--num-steps",
    "32",
    "--num-minibatches",
    "2",
    "--update-epochs",
    "2",
    "--total-timesteps",
    "2560",
    "--save-model",
    "--eval-episodes",
    "1",
]


def test_sigterm_checkpoints_and_resume_continues_exactly(tmp_path):
    """SIGTERM to the torchrun process group: all ranks stop at the same update, rank 0 writes a
    checkpoint with both ranks' envs and generators, and --resume with 2 ranks ends with the
    uninterrupted run's weights and curves; resuming with 1 rank is refused in one line."""
    (tmp_path / "whole").mkdir()
    torchrun(*RESUMED, cwd=tmp_path / "whole")
    whole = run_dir(tmp_path / "whole")

    cut = tmp_path / "cut"
    cut.mkdir()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            SCRIPT,
            *RESUMED,
            "--checkpoint-interval",
            "512",
        ],
        cwd=cut,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        while not list(cut.glob("runs/*/checkpoints/step_*.pt")):  # training is under way
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert "SIGTERM: checkpoint written" in out, (out, err)
    directory = run_dir(cut)
    step = checkpoint_step(checkpoints(directory)[-1])
    assert 512 <= step < 2560 and not list(directory.glob("*.cleanrl_model"))
    checkpoint = torch.load(checkpoints(directory)[-1], weights_only=True)  # every rank's envs and generators
    assert checkpoint["args"]["world_size"] == 2 and len(checkpoint["state"]["ranks"]) == 2
    assert [set(entry["state"]) for entry in checkpoint["state"]["ranks"]] == [{"envs"}] * 2

    (tmp_path / "other").mkdir()
    assert_stops_with_one_line(
        "ddp_ppo.py", ["--resume", str(directory)], "--resume", "written by 2 ranks, this run has 1", tmp_path / "other"
    )
    resumed = torchrun("--resume", str(directory), cwd=cut)
    assert f"resumed at step {step}" in resumed.stdout and run_dir(cut) == directory

    saved = [torch.load(next(run.glob("*.cleanrl_model")), weights_only=True)["agent"] for run in (whole, directory)]
    for name, tensor in saved[0].items():
        assert torch.equal(tensor, saved[1][name]), name
    curves = [{tag: values for tag, values in scalars(run).items() if tag != "charts/SPS"} for run in (whole, directory)]
    assert curves[0] == curves[1]


@pytest.mark.parametrize("fault", ["dead", "hung"])
def test_a_dead_or_hung_rank_stops_the_others_in_one_line(fault, tmp_path):
    """Rank 1 killed (as by the kernel's OOM killer) or stopped (hung): rank 0's collective fails at once, or
    after --collective-timeout, and it says so in one line naming the last checkpoint (torchrun then adds its
    own report of the failed ranks). A dead peer can leave a gloo send waiting (2 of 55 kills on a loaded
    machine; CI's run failed so): the timeout ends that wait too, before torchrun's SIGKILL 30 s after its
    SIGTERM."""
    process = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", SCRIPT, *CARTPOLE,
         "--num-steps", "128", "--total-timesteps", "10000000", "--checkpoint-interval", "512",
         "--collective-timeout", "10"],
        cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        while not list(tmp_path.glob("runs/*/checkpoints/step_*.pt")):  # training is under way
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
        ranks = subprocess.run(["pgrep", "-P", str(process.pid), "-f", "ddp_ppo"], capture_output=True, text=True)
        rank1, started = max(int(pid) for pid in ranks.stdout.split()), time.monotonic()  # the rank started last
        os.kill(rank1, signal.SIGKILL if fault == "dead" else signal.SIGSTOP)
        if fault == "hung":  # torchrun sees a stopped rank as running: it is killed here once rank 0 has said why it stopped
            lines: list[str] = []
            reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
            reader.start()
            while not any(line.startswith("ddp_ppo.py") for line in lines) and time.monotonic() < started + 90:
                time.sleep(0.1)
            stopped = time.monotonic() - started
            os.kill(rank1, signal.SIGKILL)
            process.wait(timeout=120)
            reader.join(10)
            err = "".join(lines)
        else:
            _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode != 0
    lines = [line for line in err.splitlines() if line.startswith("ddp_ppo.py")]
    assert len(lines) == 1 and "failed: another rank died or hung" in lines[0], err[-3000:]
    assert "last checkpoint: runs/" in lines[0] and "[rank0]: Traceback" not in err, err[-3000:]
    if fault == "hung":
        assert "Timed out" in lines[0] and 9 < stopped < 60, (stopped, lines[0])


def test_atari_default_path_two_ranks(tmp_path):
    """The default Atari path (Nature CNN, SB3 wrappers) on Breakout with 2 ranks: identical
    parameters, the standard tags, and a saved model that evaluate() plays whole games with."""
    torchrun(
        "--env-id",
        "BreakoutNoFrameskip-v4",
        "--num-envs",
        "1",
        "--num-steps",
        "32",
        "--num-minibatches",
        "2",
        "--update-epochs",
        "1",
        "--total-timesteps",
        "128",
        "--check-params-every",
        "1",
        "--save-model",
        "--eval-episodes",
        "1",
        cwd=tmp_path,
    )
    tags = scalars(run_dir(tmp_path))
    assert tags["charts/param_divergence"] == [(64, 0.0), (128, 0.0)]
    assert {"charts/SPS", "losses/value_loss", "losses/approx_kl", "eval/episodic_return"} <= set(tags)


# ---- one process, bad input


def test_plain_python_runs_one_rank(tmp_path):
    """A group of one without torchrun (its save, evaluation and resume: tests/test_contracts.py)."""
    flags = [*CARTPOLE, "--total-timesteps", "512", "--check-params-every", "1"]
    result = run_script("ddp_ppo.py", *flags, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert "1 rank(s), backend gloo; global batch 256" in result.stdout
    tags = scalars(run_dir(tmp_path))
    assert tags["charts/param_divergence"] == [(256, 0.0), (512, 0.0)]


BAD_INPUT = [
    (["--env-id", "CartPole-v1", "--num-minibatches", "3"], "--num-minibatches", "does not divide each rank's batch of 1024"),
    (["--env-id", "MountainCarContinuous-v0"], "--env-id", "supports Discrete only"),
    (["--env-id", "ALE/Breakout-v5"], "--env-id", "skips frames itself"),
    (["--env-id", "CartPole-v1", "--total-timesteps", "100"], "--total-timesteps", "less than one global rollout of 1024"),
    (["--env-id", "CartPole-v1", "--check-params-every", "-1"], "--check-params-every", "must be >= 0"),
    (["--env-id", "CartPole-v1", "--target-kl", "0"], "--target-kl", "must be positive"),
    (["--env-id", "CartPole-v1", "--collective-timeout", "0"], "--collective-timeout", "must be a positive finite"),
    (["--resume", "no/such/run"], "--resume", "no/such/run"),
    # CleanRL's --backend and --device-ids: refused when they cannot fit, whatever the machine (--no-cuda)
    (["--env-id", "CartPole-v1", "--backend", "ucc"], "--backend", "invalid choice 'ucc'"),
    (["--env-id", "CartPole-v1", "--no-cuda", "--backend", "nccl"], "--backend", "nccl needs CUDA"),
    (["--env-id", "CartPole-v1", "--no-cuda", "--device-ids", "0", "1"], "--device-ids", "2 ids for 1 rank(s)"),
    (["--env-id", "CartPole-v1", "--no-cuda", "--device-ids", "0"], "--device-ids", "needs CUDA"),
    (["--env-id", "CartPole-v1", "--device-ids", "x"], "--device-ids", "Error parsing --device-ids"),
]


@pytest.mark.parametrize("flags,flag,message", BAD_INPUT)
def test_bad_input_stops_with_one_line(flags, flag, message, tmp_path):
    assert_stops_with_one_line("ddp_ppo.py", flags, flag, message, tmp_path)


def test_local_num_envs_is_cleanrls_name_of_num_envs():
    """CleanRL's --local-num-envs (envs per rank) gives the same arguments as --num-envs."""
    import importlib.util

    import tyro

    from cleanrl_utils.resume import given_flags

    spec = importlib.util.spec_from_file_location("ddp_ppo", SCRIPT)
    ddp_ppo = importlib.util.module_from_spec(spec)
    sys.modules["ddp_ppo"] = ddp_ppo  # as when it runs: its annotations resolve in its module
    try:
        spec.loader.exec_module(ddp_ppo)
        # --resume compares the flags given with the checkpoint's: the alias is one of them
        assert given_flags(["--local-num-envs=3", "--seed", "2"], ddp_ppo.Args) == {"num_envs", "seed"}
    finally:
        del sys.modules["ddp_ppo"]
    alias = tyro.cli(ddp_ppo.Args, args=["--local-num-envs", "3"])
    assert alias == tyro.cli(ddp_ppo.Args, args=["--num-envs", "3"]) and alias.num_envs == 3
    assert alias.backend == "auto" and alias.device_ids == []  # auto: nccl on CUDA, gloo on CPU


def test_bad_input_stops_every_rank_under_torchrun(tmp_path):
    result = torchrun("--env-id", "CartPole-v1", "--num-minibatches", "3", cwd=tmp_path, check=False, timeout=120)
    assert result.returncode != 0 and not (tmp_path / "runs").exists()
    # each rank stops alike; torchrun may end the other rank before it prints, once the first has failed
    assert result.stderr.count("error: --num-minibatches: 3 does not divide each rank's batch") >= 1
    assert "Traceback" not in result.stderr.split("error: --num-minibatches")[0]  # no rank failed otherwise first


# ---- learning


@pytest.mark.learning
@pytest.mark.long
def test_two_ranks_solve_cartpole_at_ppo_global_batch(tmp_path):
    """2 ranks x 2 envs x 128 steps (ppo.py's global batch of 4 x 128, its hyperparameters)
    reach tests/test_learning.py's threshold for ppo.py within its 500k steps."""
    torchrun(
        "--env-id",
        "CartPole-v1",
        "--clip-coef",
        "0.2",
        "--num-envs",
        "2",
        "--total-timesteps",
        "500000",
        cwd=tmp_path,
        timeout=1500,  # a loaded machine: generous (pytest's own limit is 1800 s)
    )
    returns = episodic_returns(run_dir(tmp_path))
    last20 = float(np.mean(returns[-20:]))
    print(f"ddp_ppo.py, 2 ranks: mean return over the last 20 episodes {last20:.1f} ({len(returns)} episodes)")
    assert len(returns) >= 20 and last20 >= 475.0
