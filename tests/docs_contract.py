"""What tests/test_docs.py checks a script's docs page against: its flags (from its ``--help``), the TensorBoard
tags it logs (read from its source), and the pages of the site's nav.

The site's root is this repository, or ``CLEANRL_DOCS_ROOT`` (a copy with other pages, to try the tests out).
Run as ``python tests/docs_contract.py cleanrl/ppo.py ...`` it prints each script's ``--help`` text as JSON: every
script imported in one process (``tyro.cli(Args, args=["--help"])``, what ``python cleanrl/<stem>.py --help``
prints), which takes seconds where 35 interpreters take a minute.
"""

import ast
import contextlib
import functools
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(os.environ.get("CLEANRL_DOCS_ROOT") or Path(__file__).resolve().parents[1])
SCRIPTS = sorted(path.stem for path in (ROOT / "cleanrl").glob("*.py") if path.stem != "__init__")

FLAG = re.compile(r"--[A-Za-z0-9][\w.-]*")


def help_texts(stems: list[str]) -> dict[str, str]:
    """``{stem: its --help text}``, or ``{stem: "ERROR: ..."}`` for a script that cannot be imported."""
    env = {
        **os.environ,
        "COLUMNS": "250",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    paths = [str(ROOT / "cleanrl" / f"{stem}.py") for stem in stems]
    out = subprocess.run([sys.executable, __file__, *paths], env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"reading the scripts' --help failed:\n{out.stderr[-3000:]}")
    return {Path(path).stem: text for path, text in json.loads(out.stdout).items()}


def help_flags(help_text: str) -> list[str]:
    """The flags of a ``--help`` text, as a user types them: every name in the options column, but a boolean's
    ``--no-<name>`` (the page lists ``--<name>``) and ``--help``."""
    flags: list[str] = []
    for line in help_text.splitlines():
        line = line.strip(" │|")
        if not line.startswith("-"):
            continue
        names = FLAG.findall(re.split(r"\s{2,}", line, maxsplit=1)[0])
        flags += [name for name in names if name != "--help" and not (name.startswith("--no-") and f"--{name[5:]}" in names)]
    return list(dict.fromkeys(flags))


def _tag_patterns(node: ast.expr, loops: dict[str, list[ast.expr]]) -> list[str]:
    """The tags a ``add_scalar`` first argument can be: a literal, or an f-string whose names are loop variables over
    literal tuples (expanded); any other placeholder becomes ``\\0`` (the page must hold the literal text before it)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if not isinstance(node, ast.JoinedStr):
        return ["\0"]
    patterns = [""]
    for part in node.values:
        if isinstance(part, ast.Constant):
            options = [str(part.value)]
        elif isinstance(part.value, ast.Name) and part.value.id in loops:
            options = [p for element in loops[part.value.id] for p in _tag_patterns(element, loops)]
        else:
            options = ["\0"]
        patterns = [p + option for p in patterns for option in options]
    return patterns


def _logged_tags(tree: ast.AST) -> dict[str, list[str]]:
    """``{function name: tag patterns}`` of every function (and ``<module>``) in ``tree``; a function's own
    ``add_scalar`` calls, and the names of the functions it calls under ``"calls:" + name``."""
    found: dict[str, list[str]] = {}

    def visit(node: ast.AST, owner: str, loops: dict[str, list[ast.expr]]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            owner, loops = node.name, {}
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, (ast.Tuple, ast.List)):
            loops = {**loops, node.target.id: list(node.iter.elts)}
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name == "add_scalar" and node.args:
                found.setdefault(owner, []).extend(_tag_patterns(node.args[0], loops))
            elif name is not None:
                found.setdefault(owner, []).append("calls:" + name)
        for child in ast.iter_child_nodes(node):
            visit(child, owner, loops)

    visit(tree, "<module>", {})
    return found


@functools.cache
def _shared_tags() -> dict[str, list[str]]:
    """``{function name: tags}`` of the functions and methods of ``cleanrl_utils`` that log to TensorBoard
    (``Run.log_episodes``, ``Run.save_model``, ``actors.learner_turn`` ...), through the calls between them."""
    calls: dict[str, list[str]] = {}
    for path in sorted((ROOT / "cleanrl_utils").glob("*.py")):
        for owner, items in _logged_tags(ast.parse(path.read_text())).items():
            calls.setdefault(owner, []).extend(items)
    resolved: dict[str, list[str]] = {}

    def tags_of(name: str, seen: frozenset = frozenset()) -> list[str]:
        if name not in resolved:
            out = []
            for item in calls.get(name, []):
                if not item.startswith("calls:"):
                    out.append(item)
                elif item[6:] not in seen:
                    out += tags_of(item[6:], seen | {name})
            resolved[name] = out
        return resolved[name]

    return {name: tags for name in calls if (tags := tags_of(name))}


def script_tags(stem: str) -> list[str]:
    """The TensorBoard tags ``cleanrl/<stem>.py`` logs: the literals of its ``add_scalar`` calls and those of the
    ``cleanrl_utils`` functions it calls. A tag with ``\\0`` stands for a name made at run time (``actor_{i}``)."""
    shared = _shared_tags()
    tags = []
    for owner, items in _logged_tags(ast.parse((ROOT / "cleanrl" / f"{stem}.py").read_text())).items():
        for item in items:
            tags += shared.get(item[6:], []) if item.startswith("calls:") else [item]
    return [tag for tag in dict.fromkeys(tags) if tag.split("\0")[0]]


def on_page(item: str, page: str) -> bool:
    """Whether a flag or tag appears on a page as itself (``--seed`` is not found in ``--seeds``); for a tag with a
    run-time part (``charts/epsilon/actor_\\0``), the text before that part."""
    literal = item.split("\0")[0]
    end = "" if "\0" in item else r"(?![\w/-])"
    return re.search(r"(?<![\w/-])" + re.escape(literal) + end, page) is not None


def nav_pages(config: Path = ROOT / "mkdocs.yml") -> list[str]:
    """The .md files of the nav of mkdocs.yml, in order."""
    import yaml

    class Loader(yaml.SafeLoader):  # mkdocs.yml may hold !!python/name tags: read them as plain values
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    pages: list[str] = []

    def walk(entry) -> None:
        if isinstance(entry, str):
            pages.append(entry)
        elif isinstance(entry, list):
            for item in entry:
                walk(item)
        elif isinstance(entry, dict):
            for value in entry.values():
                walk(value)

    walk(yaml.load(config.read_text(), Loader=Loader).get("nav", []))
    return pages


def _print_help_texts(paths: list[str]) -> None:
    import tyro

    texts = {}
    for path in paths:
        name = "docs_contract_" + Path(path).stem
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # tyro reads the fields' docstrings through inspect, which needs the module
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # what a module prints when imported is not its help
                spec.loader.exec_module(module)
            with contextlib.redirect_stdout(said), contextlib.suppress(SystemExit):
                tyro.cli(module.Args, args=["--help"])
            texts[path] = said.getvalue()
        except Exception as error:  # one script that cannot be imported fails its own test, not every script's
            texts[path] = f"ERROR: cannot import {path}: {type(error).__name__}: {error}"
    json.dump(texts, sys.stdout)


if __name__ == "__main__":
    _print_help_texts(sys.argv[1:])
