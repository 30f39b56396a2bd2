"""``runfmt`` owns every reader of a run (``docs/ARCHITECTURE.md``, "The run format"), held
mechanically over the installed packages: outside ``runfmt/`` no code parses a run
document (``json.load``/``json.loads``/``orjson.loads`` of ``run.json``,
``summary.json``, ``diagnosis.json``, ``ab.json`` or ``sweep.json``, or a
``RunDir.read_json`` of one: the typed readers and their version check are skipped so),
and none builds ``RunTables`` (a reader gets its run's with ``runfmt.run.open_run``).
Each check is shown failing on a violation planted in a copy of the tree."""

from __future__ import annotations

import ast
from pathlib import Path

from repo_paths import ROOT
from source_tree import copy_tree, packages

#: The run's documents, by file name and by the ``runfmt.names`` constant that holds it.
RUN_FILES = {"run.json", "summary.json", "diagnosis.json", "ab.json", "sweep.json"}
RUN_FILE_NAMES = {"RUN_JSON", "SUMMARY_JSON", "DIAGNOSIS_JSON", "AB_JSON", "SWEEP_JSON"}
PARSERS = {("json", "loads"), ("json", "load"), ("orjson", "loads")}


def _names_a_run_file(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        text = sub.value if isinstance(sub, ast.Constant) else None
        if isinstance(text, str) and any(text.endswith(name) for name in RUN_FILES):
            return True
        if isinstance(sub, ast.Name | ast.Attribute):
            name = sub.id if isinstance(sub, ast.Name) else sub.attr
            if name in RUN_FILE_NAMES:
                return True
    return False


def _call_name(call: ast.Call) -> tuple[str, str] | str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else ""
        return (owner, func.attr)
    return func.id if isinstance(func, ast.Name) else None


#: Calls that read a file's contents: a run document read through one of these and parsed
#: in the same function is parsed raw.
READERS = {"open", "read_text", "read_bytes"}


def _scopes(tree: ast.Module) -> list[ast.AST]:
    """The module and each function: where a read and a parse go together."""
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return [tree, *functions]


def _calls(scope: ast.AST) -> list[ast.Call]:
    """The calls of ``scope`` itself (a nested function is a scope of its own)."""
    out, todo = [], list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(node, ast.Call):
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return sorted(out, key=lambda c: c.lineno)


def _verb(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _reads_a_run_file(call: ast.Call) -> bool:
    """``open(run_dir / "run.json")``, ``(path / SUMMARY_JSON).read_text()`` …"""
    if _verb(call) not in READERS:
        return False
    parts = [*call.args, *(k.value for k in call.keywords)]
    if isinstance(call.func, ast.Attribute):
        parts.append(call.func.value)
    return any(_names_a_run_file(p) for p in parts)


def violations(root: Path) -> list[str]:
    """``path:line: what`` for each run document parsed and each ``RunTables`` built
    outside ``runfmt/`` in the packages under ``root``."""
    found = set()
    for package in packages():
        if package == "runfmt":
            continue
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            where = path.relative_to(root)
            for scope in _scopes(tree):
                calls = _calls(scope)
                reads = any(_reads_a_run_file(c) for c in calls)
                for call in calls:
                    name = _call_name(call)
                    args = [*call.args, *(k.value for k in call.keywords)]
                    if _verb(call) == "RunTables":
                        found.add(f"{where}:{call.lineno}: builds RunTables")
                    elif name in PARSERS and (reads or any(_names_a_run_file(a) for a in args)):
                        found.add(f"{where}:{call.lineno}: parses a run document")
                    elif _verb(call) == "read_json" and any(_names_a_run_file(a) for a in args):
                        found.add(f"{where}:{call.lineno}: reads a run document raw")
    return sorted(found)


def test_no_run_document_is_parsed_and_no_run_tables_built_outside_runfmt() -> None:
    assert violations(ROOT) == []


def test_each_check_fails_on_a_planted_violation(tmp_path: Path) -> None:
    copy_tree(tmp_path, packages())
    parsed, raw = Path("diagnose", "planted.py"), Path("session", "planted_raw.py")
    (tmp_path / parsed).write_text(
        "import json\n"
        "from runfmt.names import SUMMARY_JSON\n"
        "from runfmt.tables import RunTables\n\n\n"
        "def read(run_dir):\n"
        "    info = json.loads((run_dir / 'run.json').read_text())\n"
        "    with open(run_dir / SUMMARY_JSON) as fh:\n"
        "        summary = json.load(fh)\n"
        "    return info, summary, RunTables(run_dir).requests\n"
    )
    (tmp_path / raw).write_text("def sweep(run):\n    return run.read_json('sweep.json')\n")
    assert violations(tmp_path) == [
        f"{parsed}:10: builds RunTables",
        f"{parsed}:7: parses a run document",
        f"{parsed}:9: parses a run document",
        f"{raw}:2: reads a run document raw",
    ]
