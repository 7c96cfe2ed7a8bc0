"""Count the lines of a script that are algorithm and the lines that are plumbing.

    python benchmark/scripts/script_lines.py cleanrl/ppo.py cleanrl/dqn.py
    python benchmark/scripts/script_lines.py --cleanrl ../cleanrl   # also CleanRL's equivalents, side by side

One rule set, applied the same way to this project's scripts and to CleanRL's, statement by
statement (Python's ``ast``); every physical line of the file is counted once, and a blank or
comment line counts with the statement that follows it.

Plumbing:
- every import;
- the ``Args`` fields that set up the run rather than the learning (:data:`RUN_FLAGS`), with their
  docstrings, and any method of ``Args``;
- top-level functions whose name says they check, evaluate, save, load or log
  (:data:`PLUMBING_FUNCTION`), whole;
- the ``if __name__ == "__main__":`` line, and inside the run every statement that names
  plumbing: :data:`PLUMBING_NAMES`, :data:`PLUMBING_ATTRIBUTES`, a run-flag attribute of ``args``
  (not ``args.seed`` nor ``args.capture_video``: they reach the environments), an ``assert``, or
  ``device = ...``; a statement that builds the environments (:data:`ENV_BUILDERS`) is algorithm
  whatever it names. A compound statement (``if``, ``for``, ``with``, ``try``, ``def``) whose
  header names plumbing is plumbing whole, and one whose every inner statement is plumbing is
  plumbing too.

Algorithm: everything else: the module docstring, the hyperparameter fields of ``Args``,
``make_env``, networks, pure functions (GAE, targets), and the run's environment set-up,
storage, rollouts, losses and optimiser steps.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

RUN_FLAGS = {
    "exp_name",
    "seed",
    "torch_deterministic",
    "cuda",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "capture_video",
    "save_model",
    "upload_model",
    "hf_entity",
    "eval_episodes",
    "checkpoint_interval",
    "checkpoint_buffer",
    "resume",
    "torch_threads",
    "compile",
}
"""``Args`` fields that set up the run (tracking, video, files, threads), not the learning."""

PLUMBING_FUNCTION = re.compile(r"^(check|eval|save|load|restore|resume|log_|enjoy)|checkpoint|_state$")
"""Names of top-level functions that are plumbing as a whole."""

PLUMBING_NAMES = {
    "writer",
    "SummaryWriter",
    "wandb",
    "print",
    "tyro",
    "time",
    "run_name",
    "run",
    "start_run",
    "Progress",
    "progress",
    "log_episodes",
    "sps",
    "start_time",
    "start_step",
    "seed_everything",
    "signal",
    "checkpoint",
    "checkpointer",
    "Checkpointer",
    "resumed",
    "saved",
    "resume_args",
    "restore_envs",
    "envs_state",
    "generator_state",
    "make_generator",
    "set_rng_state",
    "rng_state",
    "save_model",
    "load_model",
    "model_path",
    "evaluate",
    "episodic_returns",
    "check_args",
    "check_env",
    "require",
    "require_positive",
    "fail",
    "push_to_hub",
    "repo_id",
    "repo_name",
    "eval_episodes",
    "sys",
    "dist_stop",
    "stop_requested",
    "state",
}
"""Names whose mention makes a statement of the run plumbing."""

PLUMBING_ATTRIBUTES = {"add_scalar", "add_text", "manual_seed", "backends", "set_num_threads", "seed_everything"}
"""Attributes whose mention makes a statement of the run plumbing (``writer.add_scalar``, ``torch.backends``);
also any call of a method ``seed`` (``random.seed``, ``np.random.seed``)."""

ENV_BUILDERS = {"make_env", "make_envs", "vector_env", "make_vector_env", "SyncVectorEnv", "AsyncVectorEnv"}
"""A statement that calls one of these (or ``envpool.make*``) builds the environments: algorithm, whatever else it names."""


def _builds_envs(node: ast.AST) -> bool:
    """Whether ``node`` calls ``make_env``/``make_envs``/``vector_env``, a vector env class or ``envpool.make``."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            name = sub.func.attr if isinstance(sub.func, ast.Attribute) else getattr(sub.func, "id", "")
            if name in ENV_BUILDERS or (name.startswith("make") and "envpool" in ast.unparse(sub.func)):
                return True
    return False


def _mentions_plumbing(node: ast.AST) -> bool:
    if _builds_envs(node):
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "seed":
            return True
        if isinstance(sub, ast.Name) and sub.id in PLUMBING_NAMES:
            return True
        if isinstance(sub, ast.Attribute):
            if sub.attr in PLUMBING_ATTRIBUTES:
                return True
            if (
                isinstance(sub.value, ast.Name)
                and sub.value.id == "args"
                and sub.attr in RUN_FLAGS - {"capture_video", "seed"}
            ):
                return True
    return False


def _header_nodes(node: ast.stmt) -> list[ast.AST]:
    """The parts of a compound statement before its body (condition, iterator, context managers)."""
    if isinstance(node, (ast.If, ast.While)):
        return [node.test]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.target, node.iter]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in node.items]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [*node.decorator_list]
    return []


def _bodies(node: ast.stmt) -> list[list[ast.stmt]]:
    bodies = [getattr(node, name) for name in ("body", "orelse", "finalbody") if getattr(node, name, None)]
    bodies += [handler.body for handler in getattr(node, "handlers", [])]
    return bodies


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decorators])


class Classifier:
    def __init__(self, source: str):
        self.lines = source.splitlines()
        self.kind: dict[int, str] = {}  # 1-based line -> "algorithm" | "plumbing"

    def mark(self, first: int, last: int, kind: str) -> None:
        for line in range(first, last + 1):
            self.kind[line] = kind

    def statement(self, node: ast.stmt) -> bool:
        """Classify ``node`` (inside the run or a function); return whether it is plumbing whole."""
        first, last = _first_line(node), node.end_lineno
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Assert)):
            self.mark(first, last, "plumbing")
            return True
        bodies = _bodies(node)
        if not bodies or isinstance(node, ast.Lambda):
            is_device = (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "device"
            )
            plumbing = is_device or _mentions_plumbing(node)
            self.mark(first, last, "plumbing" if plumbing else "algorithm")
            return plumbing
        if any(_mentions_plumbing(part) for part in _header_nodes(node)):
            self.mark(first, last, "plumbing")
            return True
        inner = [self.statement(child) for body in bodies for child in body]
        plumbing = all(inner)
        header_end = bodies[0][0].lineno - 1 if bodies[0] else node.lineno
        if isinstance(bodies[0][0], ast.Expr) and isinstance(getattr(bodies[0][0], "value", None), ast.Constant):
            pass  # a docstring is classified as its own statement above
        self.mark(first, header_end, "plumbing" if plumbing else "algorithm")
        for extra_line in range(first, last + 1):  # else:/except:/finally: lines follow their block's header
            if extra_line not in self.kind:
                self.kind[extra_line] = "plumbing" if plumbing else "algorithm"
        return plumbing

    def module(self, tree: ast.Module) -> None:
        for index, node in enumerate(tree.body):
            first, last = _first_line(node), node.end_lineno
            if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                self.mark(first, last, "algorithm")  # module docstring
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.mark(first, last, "plumbing")
            elif isinstance(node, ast.ClassDef) and node.name.endswith("Args"):
                self.args_class(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and PLUMBING_FUNCTION.search(node.name):
                self.mark(first, last, "plumbing")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.mark(first, last, "algorithm")
            elif isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
                self.mark(first, node.body[0].lineno - 1, "plumbing")
                for child in node.body:
                    self.statement(child)
            else:
                self.statement(node)

    def args_class(self, node: ast.ClassDef) -> None:
        self.mark(_first_line(node), node.body[0].lineno - 1, "algorithm")
        previous_field = None
        for child in node.body:
            first, last = _first_line(child), child.end_lineno
            if isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
                previous_field = child.target.id
                self.mark(first, last, "plumbing" if previous_field in RUN_FLAGS else "algorithm")
            elif isinstance(child, ast.Expr) and isinstance(child.value, ast.Constant) and previous_field:
                self.mark(first, last, "plumbing" if previous_field in RUN_FLAGS else "algorithm")  # field docstring
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.mark(first, last, "plumbing")
            else:
                self.mark(first, last, "algorithm")

    def counts(self) -> dict[str, int]:
        """Lines per kind; a blank or comment line counts with the next statement's line."""
        result = {"algorithm": 0, "plumbing": 0}
        pending = 0
        for number in range(1, len(self.lines) + 1):
            kind = self.kind.get(number)
            if kind is None:
                pending += 1
                continue
            result[kind] += 1 + pending
            pending = 0
        result["algorithm" if not result["plumbing"] else max(result, key=result.get)] += pending
        return result


def classify(path: str | Path) -> dict[str, int]:
    """``{"algorithm": lines, "plumbing": lines, "total": lines}`` of the script at ``path``."""
    source = Path(path).read_text()
    classifier = Classifier(source)
    classifier.module(ast.parse(source))
    counts = classifier.counts()
    counts["total"] = len(source.splitlines())
    return counts


CLEANRL_EQUIVALENT = {
    "ppo": "ppo",
    "dqn": "dqn",
    "sac_continuous": "sac_continuous_action",
    "ppo_atari": "ppo_atari",
    "ppo_continuous": "ppo_continuous_action",
    "ddp_ppo": "ppo_atari_multigpu",
    "a2c": None,
    "c51": "c51",
    "c51_atari": "c51_atari",
    "dqn_atari": "dqn_atari",
    "ddpg_continuous": "ddpg_continuous_action",
    "td3_continuous": "td3_continuous_action",
    "sac_atari": "sac_atari",
    "ppo_atari_envpool": "ppo_atari_envpool",
    "ppo_rnd_envpool": "ppo_rnd_envpool",
    "ppg_procgen": "ppg_procgen",
    "ppo_atari_lstm": "ppo_atari_lstm",
    "ppo_lstm": None,
    "ppo_trxl": "ppo_trxl/ppo_trxl",
    "ppo_continuous_lstm": None,
    "rainbow_atari": "rainbow_atari",
    "r2d2_async": None,
    "impala_atari": None,
    "apex_dqn_atari": None,
    "ppo_procgen": "ppo_procgen",
    "rpo_continuous": "rpo_continuous_action",
    "ppo_pettingzoo": "ppo_pettingzoo_ma_atari",
    "pqn": "pqn",
    "pqn_atari_envpool": "pqn_atari_envpool",
    "pqn_atari_envpool_lstm": "pqn_atari_envpool_lstm",
    "dqn_structured": None,
    "ppo_structured": None,
    "qrdqn": None,
    "qrdqn_atari": None,
}
"""Our script -> CleanRL's file of the same algorithm (``cleanrl/<name>.py`` in its repository), if any."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scripts", nargs="*", type=Path, help="scripts to count (default: every cleanrl/*.py)")
    parser.add_argument("--cleanrl", type=Path, help="a checkout of CleanRL, to count its equivalents beside ours")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[2]
    scripts = args.scripts or sorted(p for p in (root / "cleanrl").glob("*.py") if p.name != "__init__.py")
    print(
        "| script | lines | algorithm | plumbing | CleanRL file | lines | algorithm | plumbing"
        " | lines ratio | plumbing ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    paired = {"ours": 0, "theirs": 0}
    for script in scripts:
        ours = classify(script)
        row = f"| {script.name} | {ours['total']} | {ours['algorithm']} | {ours['plumbing']} |"
        theirs_name = CLEANRL_EQUIVALENT.get(script.stem)
        theirs_path = args.cleanrl / "cleanrl" / f"{theirs_name}.py" if args.cleanrl and theirs_name else None
        if theirs_path is not None and theirs_path.is_file():
            theirs = classify(theirs_path)
            ratio = ours["plumbing"] / theirs["plumbing"]
            lines_ratio = ours["total"] / theirs["total"]
            row += f" {theirs_name}.py | {theirs['total']} | {theirs['algorithm']} | {theirs['plumbing']} |"
            row += f" {lines_ratio:.2f} | {ratio:.2f} |"
            paired["ours"] += ours["total"]
            paired["theirs"] += theirs["total"]
        else:
            row += " — | | | | | |"
        print(row)
    if paired["theirs"]:
        total_ratio = paired["ours"] / paired["theirs"]
        print(f"| paired scripts | {paired['ours']} | | | all pairs | {paired['theirs']} | | | {total_ratio:.2f} | |")


if __name__ == "__main__":
    sys.exit(main())
