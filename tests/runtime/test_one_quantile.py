"""``runtime.quantiles`` is the one quantile definition (``docs/ARCHITECTURE.md``), held
mechanically over the installed packages and ``benchmarks/``: outside
``runtime/quantiles.py`` no code computes a quantile of samples itself — no numpy
``percentile``/``quantile``/``nanpercentile``/``nanquantile`` (called as ``np.…`` or
imported by name), no pandas ``.quantile(`` (a Series, a frame, a groupby, a rolling
window), no ``statistics.quantiles``. Any method called ``quantile`` counts: the check
reads the source, not the types, so the server histogram's bucket estimate is named
``bucket_quantile``. Calls through the module itself (``quantiles.quantile(…)`` after
``from runtime import quantiles``) are its own. The tests are outside the rule: they
check the definition against numpy. The check is shown failing on violations planted in
a copy of the tree."""

from __future__ import annotations

import ast
from pathlib import Path

from repo_paths import ROOT
from source_tree import copy_tree, packages, parsed_modules

#: The one module allowed to compute quantiles with numpy.
OWNER = Path("runtime", "quantiles.py")
MODULE = "runtime.quantiles"
#: numpy's sample-quantile functions, and the method name pandas uses for its own.
NUMPY_NAMES = {"percentile", "quantile", "nanpercentile", "nanquantile"}
STATISTICS_NAMES = {"quantiles"}
#: Where the rule holds: the installed packages and the benchmarks.
TOPS = [*packages(), "benchmarks"]


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of names, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value)
        return f"{owner}.{node.attr}" if owner else None
    return None


def _module_aliases(tree: ast.Module) -> set[str]:
    """The names this module binds to ``runtime.quantiles`` itself."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name for a in node.names if a.name == MODULE}
        elif isinstance(node, ast.ImportFrom) and node.module == "runtime" and node.level == 0:
            names |= {a.asname or a.name for a in node.names if a.name == "quantiles"}
    return names


def _file_violations(tree: ast.Module, where: Path) -> set[str]:
    own = _module_aliases(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top = node.module.split(".")[0]
            names = NUMPY_NAMES if top == "numpy" else STATISTICS_NAMES
            if top in {"numpy", "statistics"}:
                for alias in node.names:
                    if alias.name in names:
                        found.add(f"{where}:{node.lineno}: imports {top}'s {alias.name}")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        attr, owner = node.func.attr, _dotted(node.func.value)
        if owner in own:
            continue
        if attr in NUMPY_NAMES:
            found.add(f"{where}:{node.lineno}: computes a quantile (.{attr})")
        elif attr in STATISTICS_NAMES and owner == "statistics":
            found.add(f"{where}:{node.lineno}: computes a quantile (statistics.{attr})")
    return found


def violations(root: Path) -> list[str]:
    """``path:line: what`` for each quantile computed outside ``runtime/quantiles.py`` in
    the packages and benchmarks under ``root``."""
    found: set[str] = set()
    for where, tree in parsed_modules(root, TOPS):
        if where != OWNER:
            found |= _file_violations(tree, where)
    return sorted(found)


def test_no_quantile_is_computed_outside_runtime_quantiles() -> None:
    assert violations(ROOT) == []


def test_the_check_fails_on_a_planted_violation(tmp_path: Path) -> None:
    copy_tree(tmp_path, TOPS)
    sim, bench = Path("simengine", "planted.py"), Path("benchmarks", "planted.py")
    (tmp_path / sim).write_text(
        "import numpy as np\n"
        "import statistics\n"
        "from numpy import nanquantile\n"
        "from runtime import quantiles as q\n\n\n"
        "def p99(values, frame):\n"
        "    low = frame.groupby('w')['v'].quantile(0.5)\n"
        "    return np.percentile(values, 99), low, q.quantile(values, 0.99)\n\n\n"
        "def median(values):\n"
        "    return statistics.quantiles(values, n=2)[0]\n"
    )
    (tmp_path / bench).write_text("import numpy\n\nP = numpy.nanpercentile([1.0], 50)\n")
    assert violations(tmp_path) == [
        f"{bench}:3: computes a quantile (.nanpercentile)",
        f"{sim}:13: computes a quantile (statistics.quantiles)",
        f"{sim}:3: imports numpy's nanquantile",
        f"{sim}:8: computes a quantile (.quantile)",
        f"{sim}:9: computes a quantile (.percentile)",
    ]
