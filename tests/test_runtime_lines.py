"""benchmark/scripts/runtime_lines.py: one short ppo.py run counted, and the child-process records it relies on."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "benchmark" / "scripts" / "runtime_lines.py"


def _tool():
    spec = importlib.util.spec_from_file_location("runtime_lines", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ppo_loads_a_positive_runtime_that_its_modules_sum_to(tmp_path):
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(TOOL), "--scripts", "ppo", "--json", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["script"] == "ppo.py" and row["model_saved"] and row["evaluated"]
    assert row["runtime_lines"] > 0
    assert sum(row["modules"].values()) == row["runtime_lines"]
    assert "cleanrl_utils.run" in row["modules"]
    assert not set(row["modules"]) & set(_tool().APART)
    assert "| ppo.py | " in result.stdout  # the table
    assert not (tmp_path / "runs").exists()  # the run's files stay in the tool's temporary folder


def test_a_process_killed_or_ended_by_os_exit_is_still_counted(tmp_path):
    """The sitecustomize records a killed process's imports as they happen, and an os._exit's sys.modules."""
    tool = _tool()
    site = tool.sitecustomize_dir(tmp_path)
    records = tmp_path / "records"
    records.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "RUNTIME_LINES_DIR": str(records)}
    killed = "import os, signal, cleanrl_utils.cli; os.kill(os.getpid(), signal.SIGKILL)"
    ended = "import os, cleanrl_utils.files; os._exit(3)"
    kill = subprocess.run([sys.executable, "-c", killed], env=env, timeout=60)
    end = subprocess.run([sys.executable, "-c", ended], env=env, timeout=60)
    assert (kill.returncode, end.returncode) == (-signal.SIGKILL, 3)
    found, processes = tool.collect(records)
    assert {"cleanrl_utils", "cleanrl_utils.cli", "cleanrl_utils.files"} <= set(found)
    assert found["cleanrl_utils.cli"] == ROOT / "cleanrl_utils" / "cli.py"
    assert sorted((p["ended"], p["how"]) for p in processes) == [(False, None), (True, "os._exit")]
