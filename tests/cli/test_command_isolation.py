"""The CLI is thin (docs/ARCHITECTURE.md, "A command"): a module of prefillscope/commands/
parses flags and calls one function; what two commands share lives in a module of
prefillscope/ that is not a command, so no command imports another (``sweep`` imported
``bench`` and ``report``, ``bench`` imported ``sweep``, ``diagnose_ab`` ``diagnose``).
Lazy imports inside functions count."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "prefillscope.commands"


def _imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, as a dotted name (``from X import y`` gives X and
    X.y, since y may be a module; a relative import is resolved against ``PACKAGE``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = PACKAGE.rsplit(".", node.level - 1)[0] if node.level > 1 else PACKAGE
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def command_imports(commands: Path) -> list[str]:
    """``importer -> imported`` for every command module importing another one."""
    modules = {p.stem for p in commands.glob("*.py") if p.stem != "__init__"}
    found = []
    for stem in sorted(modules):
        imported = _imported_modules(commands / f"{stem}.py")
        found += [
            f"{stem} -> {other}"
            for other in sorted(modules - {stem})
            if f"{PACKAGE}.{other}" in imported
        ]
    return found


def test_no_command_imports_another_command() -> None:
    assert command_imports(ROOT / "prefillscope" / "commands") == []


def test_a_command_importing_another_is_caught(tmp_path: Path) -> None:
    """Planted: a top-level import, a lazy one, a ``from package import module`` and a
    relative one are each reported; a shared helper outside commands/ is not."""
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "bench.py").write_text("from prefillscope.bench_flags import BenchFlags\n")
    (tmp_path / "report.py").write_text("def f():\n    import prefillscope.commands.bench\n")
    (tmp_path / "sweep.py").write_text("from prefillscope.commands import report\n")
    (tmp_path / "serve.py").write_text("from .sweep import run\nfrom . import diagnose\n")
    (tmp_path / "diagnose.py").write_text("from prefillscope.diagnose_group import app\n")
    assert command_imports(tmp_path) == [
        "report -> bench",
        "serve -> diagnose",
        "serve -> sweep",
        "sweep -> report",
    ]
