"""The import direction (``benchmarks/import_graph.py``, ``docs/ARCHITECTURE.md``): no package
imports one above it, the leaves import nothing above them, diagnose/ not the simulator."""

from __future__ import annotations

import fnmatch
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _import_graph() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "import_graph", ROOT / "benchmarks/import_graph.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


graph = _import_graph()


def test_no_package_imports_one_above_it() -> None:
    assert graph.violations(graph.package_edges()) == []


def test_diagnose_does_not_import_the_simulator() -> None:
    assert ("diagnose", "simengine") not in graph.package_edges()


def test_every_installed_package_has_a_place_in_the_direction() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    include = re.search(r"include = \[(.*?)\]", pyproject)
    assert include is not None
    installed = {name.strip(' "*') for name in include.group(1).split(",")}
    assert installed == set(graph.ALLOWED)


def test_a_wrong_way_import_is_caught(tmp_path: Path) -> None:
    """A lazy import inside a function counts: a leaf importing the CLI is reported."""
    for package in graph.ALLOWED:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "runtime" / "clock.py").write_text(
        "def now():\n    from prefillscope.cli import main\n    return main\n"
    )
    (tmp_path / "session" / "bench.py").write_text("from loadgen.run import LoadRun\n")
    edges = graph.package_edges(tmp_path)
    assert graph.violations(edges) == ["runtime/clock.py: runtime must not import prefillscope"]


def test_every_path_a_docstring_or_document_names_exists() -> None:
    """``probes/latency.py``, ``docs/ARCHITECTURE.md`` …: a path into the repository in any
    source or markdown file is a file or folder the repository holds. The folders a
    checkout makes and ``.gitignore`` leaves out (``runs/``, where the README's first
    command writes its run, ``.venv/``, ``build/`` …) are not the repository's: a path
    into them (``runs/base`` in an example) names what a user's run writes."""
    ignored = [
        line.strip().strip("/")
        for line in (ROOT / ".gitignore").read_text().splitlines()
        if line.strip().endswith("/")
    ]
    tops = sorted(
        p.name
        for p in ROOT.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and not any(fnmatch.fnmatch(p.name, pattern) for pattern in ignored)
    )
    alternatives = "|".join(map(re.escape, tops))
    reference = re.compile(rf"(?<![\w/.-])((?:{alternatives})/[\w./-]*\w)")
    sources = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    for top in [*graph.ALLOWED, "tests", "benchmarks"]:
        sources += [p for p in (ROOT / top).rglob("*.py") if "fixtures" not in p.parts]
    missing = [
        f"{path.relative_to(ROOT)}: {ref}"
        for path in sources
        for ref in reference.findall(path.read_text(encoding="utf-8"))
        if not (ROOT / ref).exists()
    ]
    assert missing == []


def test_the_tests_mirror_the_packages() -> None:
    """``tests/README.md``: a test file lives in the folder of its package (``cli`` and
    ``report`` for the CLI package, ``e2e`` for whole commands against live servers), the
    helpers in ``support``; only this file stays at the top; no two share a base name."""
    tests = ROOT / "tests"
    folders = (set(graph.ALLOWED) - {"prefillscope"}) | {"cli", "report", "e2e"}
    files = sorted(p.relative_to(tests) for p in tests.rglob("test_*.py"))
    misplaced = [
        str(f)
        for f in files
        if (len(f.parts) == 1 and f.name != Path(__file__).name)
        or (len(f.parts) > 1 and f.parts[0] not in folders)
    ]
    assert misplaced == []
    names = [f.name for f in files]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
