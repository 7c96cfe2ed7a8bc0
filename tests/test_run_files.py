"""A run directory is data: links planted in it redirect no write, its saved arguments are checked as flags, and a
full disk at any moment is one line.

From the third hostile review (issue 29): a symlink planted in a run directory as the lock file, a
checkpoint's temporary file or the model's temporary file made a resumed run write through it into
a file elsewhere; a checkpoint or model whose saved arguments had the wrong type (a string learning
rate, a float env count, a list gamma, a None timeout, a string or missing seed, a None or list env
id) gave a traceback on resume or evaluation; a full disk before the first checkpoint was a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from cleanrl_utils.legacy import files
from cleanrl_utils.legacy.run import parse_args
from cleanrl_utils.writes import UnsafePath, check_tree, create_new, make_folder, open_regular, write_atomic
from tests.conftest import ROOT, assert_stops_with_one_line, enjoy, run_dir, run_script

FLAGS = ["--num-envs", "1", "--num-steps", "128", "--total-timesteps", "1024", "--checkpoint-interval", "512"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A ppo.py run with checkpoints at steps 512 and 1024 and a saved model."""
    cwd = tmp_path_factory.mktemp("template")
    run_script("ppo.py", *FLAGS, "--save-model", "--eval-episodes", "1", cwd=cwd)
    return run_dir(cwd)


def copy_run(finished_run: Path, tmp_path: Path) -> Path:
    """A copy of ``finished_run`` without its model: a run stopped before its end, which ``--resume`` continues
    (a run with its model has finished, and resuming it is refused)."""
    run = tmp_path / "runs" / finished_run.name
    shutil.copytree(finished_run, run)
    (run / "ppo.cleanrl_model").unlink()
    return run


def test_resuming_a_finished_run_is_refused_and_its_model_kept(finished_run, tmp_path):
    run = tmp_path / "runs" / finished_run.name
    shutil.copytree(finished_run, run)
    model = (run / "ppo.cleanrl_model").read_bytes()
    message = f"{run} has finished: its model {run / 'ppo.cleanrl_model'} exists and resuming would overwrite it"
    (tmp_path / "elsewhere").mkdir()
    assert_stops_with_one_line("ppo.py", ["--resume", str(run), "--save-model"], "--resume", message, tmp_path / "elsewhere")
    assert (run / "ppo.cleanrl_model").read_bytes() == model


# ---- links planted in a run directory


@pytest.mark.parametrize(
    "planted",
    ["run.lock", "checkpoints/step_1024.pt.tmp", "ppo.cleanrl_model.tmp", "checkpoints/step_1024.pt", "videos"],
)
def test_a_link_planted_in_a_run_directory_stops_the_resumed_run_and_writes_nothing_through_it(
    planted, finished_run, tmp_path
):
    run = copy_run(finished_run, tmp_path)
    (run / "checkpoints" / "step_1024.pt").unlink()  # the resumed run would write step_1024 again
    outside = tmp_path / "outside"
    outside.write_text("not yours")
    (run / planted).unlink(missing_ok=True)
    (run / planted).symlink_to(outside)
    flags = ["--resume", str(run / "checkpoints" / "step_512.pt"), "--save-model", "--eval-episodes", "1"]
    result = run_script("ppo.py", *flags, cwd=tmp_path, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert (
        result.stderr.strip()
        == f"error: --resume: {run / planted} is a symbolic link; a run folder holds only files and folders"
    )
    assert outside.read_text() == "not yours"


def test_a_planted_checkpoints_folder_link_is_refused(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run / "checkpoints", elsewhere)
    (run / "checkpoints").symlink_to(elsewhere)
    result = run_script("ppo.py", "--resume", str(run / "checkpoints" / "step_512.pt"), cwd=tmp_path, check=False)
    assert result.returncode == 2 and "checkpoints is a symbolic link" in result.stderr, result.stderr[-2000:]


def test_write_file_never_writes_through_a_link_at_its_temporary_or_final_name(tmp_path):
    """Below the run directory's check: the writer itself creates its temporary file new, without following links."""
    from dataclasses import dataclass

    @dataclass
    class Args:
        env_id: str = "CartPole-v1"
        seed: int = 1

    outside = tmp_path / "outside"
    outside.write_text("not yours")
    target = tmp_path / "run" / "checkpoints" / "step_1.pt"
    target.parent.mkdir(parents=True)
    (target.parent / "step_1.pt.tmp").symlink_to(outside)
    files.write_file(target, "checkpoint", "ppo", Args(), {"global_step": 1})
    assert outside.read_text() == "not yours" and target.is_file() and not target.is_symlink()
    target.unlink()
    target.symlink_to(outside)  # a link at the final name is replaced, not written through
    files.write_file(target, "checkpoint", "ppo", Args(), {"global_step": 1})
    assert outside.read_text() == "not yours" and not target.is_symlink()
    files.read_file(target, "checkpoint", "ppo")
    (tmp_path / "run" / "m.cleanrl_model").mkdir()  # a folder where the file goes: refused, in one line
    with pytest.raises(files.WriteFailed, match="m.cleanrl_model is a folder: refusing to replace it"):
        files.write_file(tmp_path / "run" / "m.cleanrl_model", "model", "ppo", Args(), {})
    assert not list((tmp_path / "run").glob("*.tmp"))


def test_the_writes_module_refuses_links_fifos_and_folders(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("x")
    (tmp_path / "link").symlink_to(outside)
    with pytest.raises(UnsafePath, match="link is a symbolic link"):
        open_regular(tmp_path / "link")
    with pytest.raises(UnsafePath, match="link is a symbolic link"):
        create_new(tmp_path / "link")
    import os

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UnsafePath, match="fifo is a FIFO"):
        open_regular(tmp_path / "fifo")
    with pytest.raises(UnsafePath, match="fifo is a FIFO"):
        check_tree(tmp_path)
    (tmp_path / "sub").symlink_to(tmp_path)
    with pytest.raises(UnsafePath, match="sub is a symbolic link, not a folder"):
        make_folder(tmp_path / "sub" / "deeper", base=tmp_path)
    write_atomic(tmp_path / "link", "new")  # replaces the link itself
    assert outside.read_text() == "x" and (tmp_path / "link").read_text() == "new"


# ---- saved arguments are checked as flags are

FORGED = [
    ("learning_rate", "3e-4", "its saved learning_rate is '3e-4' (str), not float"),
    ("num_envs", 1.0, "its saved num_envs is 1.0 (float), not int"),
    ("gamma", [0.99], "its saved gamma is [0.99] (list), not float"),
    ("env_timeout", None, "its saved env_timeout is None (NoneType), not float"),
    ("seed", "1", "its saved seed is '1' (str), not int"),
    ("seed", "DELETE", "its saved arguments lack seed"),
    ("env_id", None, "its saved env_id is None (NoneType), not str"),
    ("env_id", ["CartPole-v1"], "its saved env_id is ['CartPole-v1'] (list), not str"),
    ("env_mode", "fast", "its saved env_mode is 'fast' (str), not one of 'sync', 'async'"),
    ("num_minibatches", 3, "its saved num_minibatches does not divide the batch of 128"),  # a range: the flag's check
    ("vf_coef", -1.0, "its saved vf_coef must be >= 0, got -1.0"),
]


def forge(path: Path, field: str, value) -> None:
    """Rewrite the file at ``path`` with its saved argument ``field`` set to ``value`` ("DELETE": removed)."""
    content = torch.load(path, weights_only=True)
    if value == "DELETE":
        del content["args"][field]
    else:
        content["args"][field] = value
    if field in ("env_id", "seed"):
        content[field] = value  # the header's copy too (env_id)
    torch.save(content, path)


@pytest.mark.parametrize("field,value,message", FORGED)
def test_a_checkpoint_with_a_saved_argument_of_the_wrong_type_or_range_is_one_line(
    field, value, message, finished_run, tmp_path, capsys
):
    from cleanrl.ppo import Args, check_args

    run = copy_run(finished_run, tmp_path)
    checkpoint = run / "checkpoints" / "step_512.pt"
    forge(checkpoint, field, value)
    if field in ("env_id", "seed"):  # as args.json says: the checkpoint belongs to this run
        import json

        recorded = json.loads((run / "args.json").read_text())
        recorded.pop(field) if value == "DELETE" else recorded.update({field: value})
        (run / "args.json").write_text(json.dumps(recorded))
    with pytest.raises(SystemExit) as stopped:
        parse_args(Args, str(ROOT / "cleanrl" / "ppo.py"), check_args, argv=["--resume", str(checkpoint)])
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and err == f"error: {checkpoint}: {message}" or message in err, err
    assert err.startswith(f"error: {checkpoint}: "), err


@pytest.mark.parametrize("field,value,message", [case for case in FORGED if case[0] not in ("num_minibatches", "vf_coef")])
def test_a_model_with_a_saved_argument_of_the_wrong_type_is_one_line_in_evaluation(
    field, value, message, finished_run, tmp_path, capsys
):
    from cleanrl.ppo import evaluate

    model = tmp_path / "ppo.cleanrl_model"
    shutil.copy(finished_run / "ppo.cleanrl_model", model)
    forge(model, field, value)
    with pytest.raises(SystemExit) as stopped:
        evaluate(str(model), 1)
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and err == f"error: {model}: {message}", err


def test_a_given_flag_is_still_named_as_the_flag_on_resume(finished_run, tmp_path, capsys):
    from cleanrl.ppo import Args, check_args

    run = copy_run(finished_run, tmp_path)
    argv = ["--resume", str(run / "checkpoints" / "step_512.pt"), "--env-timeout", "-1"]
    with pytest.raises(SystemExit):
        parse_args(Args, str(ROOT / "cleanrl" / "ppo.py"), check_args, argv=argv)
    assert capsys.readouterr().err.strip() == "error: --env-timeout: must be positive, got -1.0"


# ---- a full disk at any moment


@pytest.mark.parametrize("left", [0, 4096, 8192, 24576])
def test_a_full_disk_before_the_first_checkpoint_is_one_line_and_leaves_nothing_half_written(left, tmp_path):
    """A small tmpfs (root only; skipped elsewhere) filled to leave ``left`` bytes: the run directory, the lock
    file and args.json (0, 4 KiB), the TensorBoard events (8 KiB), the first checkpoint (24 KiB)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        free = shutil.disk_usage(disk).free
        (disk / "filler").write_bytes(b"\0" * max(free - left - 4096, 0))
        result = run_script("ppo.py", *FLAGS, cwd=disk, check=False, timeout=300)
        assert result.returncode in (1, 2) and "Traceback" not in result.stderr, result.stderr[-3000:]
        line = result.stderr.strip().splitlines()
        assert len(line) == 1 and ("No space left on device" in line[0] or "the disk is full" in line[0]), line
        for run in (disk / "runs").glob("*"):  # what is left is whole
            assert not list(run.rglob("*.tmp")), list(run.rglob("*"))
            if (run / "args.json").exists():
                import json

                json.loads((run / "args.json").read_text())
            for checkpoint in run.glob("checkpoints/*.pt"):
                files.read_file(checkpoint, "checkpoint", "ppo")
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


# ---- forged checkpoint and model contents (issue 29's fresh attack): one line and exit 2, never a traceback


def forge_content(path: Path, edit) -> None:
    """Rewrite the file at ``path`` after ``edit(content)``, as an attacker with torch would (checksums valid)."""
    content = torch.load(path, weights_only=True)
    edit(content)
    torch.save(content, path)


def networks(content: dict) -> dict:
    """Where a file keeps its networks' state dicts: a checkpoint's ``state``, a model's top level."""
    return content["state"] if content["kind"] == "checkpoint" else content


def big_weight(content: dict) -> None:
    networks(content)["agent"]["actor.4.weight"] = torch.full((2, 64), 1e300, dtype=torch.float64)


FORGED_CONTENTS = {
    "no iteration counter": (lambda c: c["counters"].pop("iteration"), "has no 'iteration' counter"),
    "a text counter": (lambda c: c["counters"].update(iteration="1"), "its 'iteration' counter is str"),
    "an iteration beyond its step": (lambda c: c["counters"].update(iteration=10**9), "iteration 1000000000"),
    "a step beyond the run": (lambda c: c.update(global_step=10**18), "beyond --total-timesteps"),
    "a generator state of the wrong type": (lambda c: c["rng"]["numpy"].update(keys=[1, 2, 3]), "does not fit"),
    "an env log with a step out of the space": (
        lambda c: c["state"]["envs"]["logs"][0]["events"].append(["step", 7]),
        "does not fit",
    ),
    "a network record that is not text": (lambda c: c["modules"].update(agent=5), "record of agent is not text"),
    "a float64 weight beyond float32": (big_weight, "is torch.float64, this script's torch.float32"),
    "an infinite weight": (lambda c: networks(c)["agent"]["actor.4.weight"].fill_(float("inf")), "non-finite values"),
    "an iteration that does not make its step": (
        lambda c: c["counters"].update(iteration=3),
        "its iteration 3 does not make its global_step 512 (128 each)",
    ),
    "a step between iterations": (lambda c: c.update(global_step=500), "global_step 500 is not a multiple of the 128"),
    "a NaN moment of the optimiser": (
        lambda c: c["state"]["optimizer"]["state"][0]["exp_avg"].fill_(float("nan")),
        "its optimizer's exp_avg of parameter 0 holds non-finite values",
    ),
    "a NaN learning rate": (lambda c: c["state"]["optimizer"]["param_groups"][0].update(lr=float("nan")), "lr is nan"),
    "a NaN learning rate tensor": (
        lambda c: c["state"]["optimizer"]["param_groups"][0].update(lr=torch.tensor(float("nan"))),
        "its optimizer's lr is tensor(nan)",
    ),
    "a learning rate that is text": (lambda c: c["state"]["optimizer"]["param_groups"][0].update(lr="0.1"), "lr is '0.1'"),
    "a negative learning rate": (lambda c: c["state"]["optimizer"]["param_groups"][0].update(lr=-1e6), "lr is -1000000.0"),
    "a negative epsilon": (lambda c: c["state"]["optimizer"]["param_groups"][0].update(eps=-1.0), "eps is -1.0"),
    "a negative second moment": (
        lambda c: c["state"]["optimizer"]["state"][0]["exp_avg_sq"].fill_(-1.0),
        "exp_avg_sq of parameter 0 holds negative values",
    ),
    "a negative step": (lambda c: c["state"]["optimizer"]["state"][0]["step"].fill_(-1.0), "step of parameter 0 holds neg"),
    "a step its envs did not make": (
        lambda c: c.update(global_step=384) or c["counters"].update(iteration=3),
        "its global_step 384 is not the 512 vector steps of its envs",
    ),
    "no optimiser": (lambda c: c["state"].pop("optimizer"), "it holds no 'optimizer'"),
    "a moment of another shape": (
        lambda c: c["state"]["optimizer"]["state"][0].update(exp_avg=torch.zeros(3)),
        "its optimizer's exp_avg of parameter 0 is (3,)",
    ),
}


@pytest.mark.parametrize("forged", list(FORGED_CONTENTS))
def test_a_checkpoint_with_forged_counters_generators_env_logs_or_weights_is_one_line(forged, finished_run, tmp_path):
    edit, message = FORGED_CONTENTS[forged]
    run = copy_run(finished_run, tmp_path)
    checkpoint = run / "checkpoints" / "step_512.pt"
    forge_content(checkpoint, edit)
    events = sorted(run.glob("events.out.tfevents.*"))
    result = run_script("ppo.py", "--resume", str(checkpoint), cwd=tmp_path, check=False)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr[-2000:]
    # nothing said but the run directory it was resuming, and no events file left behind whose purge step would hide
    # the run's later events
    assert [line.split(" (resumed at step ")[0] for line in result.stdout.splitlines()] == [f"run directory: {run}"]
    assert sorted(run.glob("events.out.tfevents.*")) == events


@pytest.mark.parametrize("forged", ["a network record that is not text", "a float64 weight beyond float32"])
def test_a_model_with_a_forged_network_is_one_line_in_evaluation(forged, finished_run, tmp_path):
    edit, message = FORGED_CONTENTS[forged]
    model = tmp_path / "ppo.cleanrl_model"
    shutil.copy(finished_run / "ppo.cleanrl_model", model)
    forge_content(model, edit)
    result = enjoy(str(model), "--eval-episodes", "1", cwd=tmp_path, check=False)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr[-2000:]


def test_a_deeply_nested_args_json_is_one_line_on_resume(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path)
    (run / "args.json").write_text("[" * 100_000 + "]" * 100_000)
    result = run_script("ppo.py", "--resume", str(run), cwd=tmp_path, check=False)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]


def test_a_sync_env_whose_close_hangs_ends_within_the_env_timeout(tmp_path):
    import time

    start = time.perf_counter()
    flags = ["--num-envs", "1", "--num-steps", "16", "--total-timesteps", "32", "--env-timeout", "3"]
    result = run_script("ppo.py", *flags, "--env-id", "tests.envs:HangingClose-v0", cwd=tmp_path, check=False)
    assert result.returncode != 0 and "closing the envs: no answer within --env-timeout 3 s" in result.stderr
    assert "Traceback" not in result.stderr and time.perf_counter() - start < 60, result.stderr[-2000:]


# ---- the lock file, the first line of a resumed run, flags given twice, help texts (issue 34)


def test_help_shows_one_default_per_flag_and_what_eval_episodes_governs(tmp_path):
    out = run_script("ppo.py", "--help", cwd=tmp_path).stdout
    text = " ".join(line.strip(" │") for line in out.splitlines())
    text = " ".join(text.split())
    assert "part of the run directory name (default: the script's file name) --seed" in text
    assert "(default: '')" not in text
    assert "--eval-episodes INT episodes of each evaluation: the saved model's (--save-model)" in text


@pytest.mark.parametrize(
    "flags,warning",
    [
        (["--total-timesteps", "512", "--total-timesteps", "1024"], "(--total-timesteps 512, then --total-timesteps 1024)"),
        (
            ["--total-timesteps", "1024", "--cuda", "--no-cuda"],
            "--cuda given twice (--cuda, then --no-cuda): --no-cuda is used",
        ),
        (
            ["--total-timesteps", "1024", "--seed", "2", "--seed=3"],
            "--seed given twice (--seed 2, then --seed=3): --seed=3 is used",
        ),
    ],
)
def test_a_flag_given_twice_is_said_and_the_last_is_used(flags, warning, tmp_path):
    """A launcher or a test may append an override; the run says so on stderr, once, and uses the last value."""
    result = run_script("ppo.py", "--num-envs", "1", "--num-steps", "256", *flags, cwd=tmp_path)
    assert result.stderr.count("given twice") == 1 and warning in result.stderr, result.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    args = json.loads((run_dir / "args.json").read_text())
    assert (
        args["total_timesteps"] == 1024
        and args["cuda"] is ("--no-cuda" not in flags)
        and args["seed"] == (3 if "--seed=3" in flags else 1)
    )


def test_the_lock_file_goes_when_the_run_is_over_and_still_keeps_a_second_process_out(finished_run, tmp_path):
    from cleanrl_utils.legacy.run import _lock_run, _unlock

    assert not (finished_run / "run.lock").exists()  # a run that finished
    run = copy_run(finished_run, tmp_path)
    resumed = run_script("ppo.py", "--resume", str(run), "--total-timesteps", "1024", cwd=tmp_path)
    assert not (run / "run.lock").exists(), resumed.stdout  # a resumed run that finished
    lock = _lock_run(run, "--resume")
    assert (run / "run.lock").read_text() == f"{os.getpid()}\n"
    late = open_regular(run / "run.lock", "a+")  # opened by another process before the run ended
    with pytest.raises(SystemExit) as stopped:  # one process per run
        _lock_run(run, "--resume")
    assert stopped.value.code == 2
    _unlock(run, lock, os.getpid())
    assert not (run / "run.lock").exists() and lock.closed
    again = _lock_run(run, "--resume")  # the directory is free again; a file removed under a late opener is not used
    assert (run / "run.lock").exists() and os.path.samestat(os.fstat(again.fileno()), os.stat(run / "run.lock"))
    assert not os.path.samestat(os.fstat(late.fileno()), os.stat(run / "run.lock"))
    _unlock(run, again, os.getpid() + 1)  # only the process that locked it removes it
    assert (run / "run.lock").exists()
    _unlock(run, again, os.getpid())
    late.close()


def test_a_resumed_run_says_its_directory_first(tmp_path):
    flags = ["--env-id", "CartPole-v1", "--total-timesteps", "1000", "--learning-starts", "200", "--buffer-size", "1000"]
    run_script("dqn.py", *flags, "--checkpoint-interval", "500", cwd=tmp_path)
    run = run_dir(tmp_path)
    (run / "checkpoints" / "step_1000.pt").unlink()
    out = run_script("dqn.py", "--resume", str(run), "--checkpoint-buffer", cwd=tmp_path).stdout.splitlines()
    assert out[0] == f"run directory: {run} (resumed at step 500)", out
    assert out[1].startswith("each checkpoint holds the replay buffer")  # the script's own lines after it
    assert out[2].startswith("the checkpoint has no replay buffer: refilling it")


def test_a_warning_is_shown_once_per_run(tmp_path):
    """gymnasium's deprecation of a -v4 MuJoCo env: once, not again for the training envs and the evaluation env."""
    pytest.importorskip("mujoco")
    flags = ["--env-id", "Hopper-v4", "--num-envs", "1", "--num-steps", "64", "--total-timesteps", "64"]
    result = run_script("ppo_continuous.py", *flags, "--save-model", "--eval-episodes", "1", cwd=tmp_path)
    assert result.stderr.count("The environment Hopper-v4 is out of date") == 1, result.stderr


def test_a_run_without_a_model_names_its_last_checkpoint_to_evaluate(tmp_path):
    lines = run_script("ppo.py", *FLAGS, cwd=tmp_path).stdout.strip().splitlines()
    checkpoint = f"runs/{run_dir(tmp_path).name}/checkpoints/step_1024.pt"
    assert lines[-1] == f"evaluate its last checkpoint: python -m cleanrl_utils.enjoy {checkpoint} --eval-episodes 10"
    assert "return" in enjoy(checkpoint, "--eval-episodes", "1", cwd=tmp_path).stdout  # the command works
