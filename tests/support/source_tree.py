"""The project's source as the mechanical "one owner" checks read it: the installed
packages in their import order (``benchmarks/import_graph.py``'s ``ALLOWED``), each
module parsed, and a copy of the tree to plant a violation in."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from repo_paths import ROOT


def packages() -> list[str]:
    """The installed packages, by name."""
    spec = importlib.util.spec_from_file_location("graph", ROOT / "benchmarks/import_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return sorted(module.ALLOWED)


def parsed_modules(root: Path, tops: Iterable[str]) -> Iterator[tuple[Path, ast.Module]]:
    """(path relative to ``root``, syntax tree) of every module under the folders ``tops``."""
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            yield path.relative_to(root), ast.parse(path.read_text(encoding="utf-8"), str(path))


def copy_tree(dest: Path, tops: Iterable[str]) -> Path:
    """A copy of the folders ``tops`` of the repository under ``dest``; ``dest``."""
    for top in tops:
        shutil.copytree(ROOT / top, dest / top)
    return dest


def docstrings(tree: ast.Module) -> set[int]:
    """The ids of the module's, classes' and functions' docstring constants."""
    out = set()
    for node in ast.walk(tree):
        owners = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        if isinstance(node, owners) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out
