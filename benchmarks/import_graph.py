"""The package import graph of prefillscope, and the direction it must keep.

    python benchmarks/import_graph.py          # the graph: package -> packages it imports
    python benchmarks/import_graph.py --check  # also exit 1 on any import against the direction
    python benchmarks/import_graph.py --sizes  # also the modules over MODULE_LINES lines

Every ``import``/``from … import`` of every module is read with ``ast`` (the ones inside
functions and ``TYPE_CHECKING`` blocks too: a lazy import is still a dependency). The
allowed direction is ``ALLOWED`` below; ``tests/test_architecture.py`` holds the tree to it
and ``docs/ARCHITECTURE.md`` explains it.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The size a module should stay under (lines).
MODULE_LINES = 400

#: Each package and the packages it may import. Bottom up: the leaves (runtime, workloads,
#: perfmodel, runfmt) first, the command line (prefillscope) last. runtime imports nothing;
#: workloads only runtime (its one quantile definition, ``runtime.quantiles``).
ALLOWED: dict[str, frozenset[str]] = {
    "runtime": frozenset(),
    "workloads": frozenset({"runtime"}),
    "perfmodel": frozenset({"workloads"}),
    "runfmt": frozenset({"workloads", "runtime"}),
    "loadgen": frozenset({"workloads", "runtime", "runfmt"}),
    "probes": frozenset({"workloads", "runtime", "runfmt", "loadgen"}),
    "simengine": frozenset({"workloads", "runtime", "perfmodel"}),
    "diagnose": frozenset({"workloads", "runtime", "perfmodel", "runfmt", "loadgen", "probes"}),
    "session": frozenset(
        {"workloads", "runtime", "perfmodel", "runfmt", "loadgen", "probes", "simengine",
         "diagnose"}
    ),
    "prefillscope": frozenset(
        {"workloads", "runtime", "perfmodel", "runfmt", "loadgen", "probes", "simengine",
         "diagnose", "session"}
    ),
}  # fmt: skip


def imported_packages(path: Path) -> list[str]:
    """The top-level names one module imports (relative imports are its own package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.split(".")[0])
    return names


def package_edges(root: Path = ROOT) -> dict[tuple[str, str], list[str]]:
    """(importer, imported) package pairs across packages, each with the modules doing it."""
    edges: dict[tuple[str, str], list[str]] = {}
    for package in ALLOWED:
        for path in sorted((root / package).rglob("*.py")):
            module = str(path.relative_to(root))
            for imported in set(imported_packages(path)):
                if imported in ALLOWED and imported != package:
                    edges.setdefault((package, imported), []).append(module)
    return edges


def violations(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """One line per module that imports a package its own package may not."""
    return [
        f"{module}: {importer} must not import {imported}"
        for (importer, imported), modules in sorted(edges.items())
        if imported not in ALLOWED[importer]
        for module in modules
    ]


def long_modules(root: Path = ROOT) -> list[tuple[int, str]]:
    """(lines, module) of every package module over ``MODULE_LINES`` lines, longest first."""
    sizes = [
        (len(path.read_text(encoding="utf-8").splitlines()), str(path.relative_to(root)))
        for package in ALLOWED
        for path in (root / package).rglob("*.py")
    ]
    return sorted((size for size in sizes if size[0] > MODULE_LINES), reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 on a wrong-way import")
    parser.add_argument("--sizes", action="store_true", help=f"modules over {MODULE_LINES} lines")
    args = parser.parse_args()
    edges = package_edges()
    sizes = Counter({p: sum(1 for _ in (ROOT / p).rglob("*.py")) for p in ALLOWED})
    for package in ALLOWED:
        targets = sorted(imp for (imp_from, imp) in edges if imp_from == package)
        arrows = ", ".join(f"{t} ({len(edges[(package, t)])})" for t in targets) or "-"
        print(f"{package:<13} {sizes[package]:>3} modules -> {arrows}")
    wrong = violations(edges)
    for line in wrong:
        print(f"WRONG WAY: {line}")
    if not wrong:
        print("no import against the documented direction")
    if args.sizes:
        for lines, module in long_modules():
            print(f"{lines:>5} lines  {module}")
    if args.check and wrong:
        sys.exit(1)


if __name__ == "__main__":
    main()
