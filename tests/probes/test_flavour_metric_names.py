"""No module outside the flavour mappings names a server flavour's metric.

The diagnosis, the oracle, the reports and the probes read the canonical series
(``probes.canonical``) through the mappings (``probes/mappings/*.toml``); a metric name
typed in a module (``"vllm:nixl_xfer_time_seconds"``) reads one flavour's spelling only,
and the same data named the other way turns a check "not applicable" (SGLang's
``kv_transfer_latency_ms`` under H5, before this check). A string constant in a package
is flagged when it begins with a mapping's metric prefix (``vllm:``, ``sglang_``, the
embedded engine's ``prefillscope_engine_`` …) or is a name a mapping reads. Docstrings
are prose and may name them.

Exempt, each with its reason (``EXEMPT``): the embedded engine's one owner of its own
names, and the embedded server itself (it *exposes* vLLM's names, so that it is read like
vLLM).

The owner's names are imported only where the engine is (``ENGINE_NAME_READERS``): the
engine that exposes them and the cache model the oracle reads from its info metric. The
diagnosis and the calibration read the engine's step kinds and evictions as canonical
series, through its mapping, so another engine's mapping can feed the same checks.
"""

from __future__ import annotations

import ast
from pathlib import Path

from repo_paths import ROOT
from source_tree import copy_tree, packages, parsed_modules

from probes.mapping import BUILTIN_FLAVOURS, builtin_mapping

#: Modules (or folders) allowed to name flavour metrics, and why.
EXEMPT = {
    "runtime/engine_metrics.py": "the one owner of the embedded engine's own names",
    "simengine/": "the embedded server exposes vLLM's names (it writes them, reads none)",
}

#: The modules that may import ``runtime.engine_metrics``, and why.
ENGINE_NAME_READERS = {
    "simengine/metrics.py": "the engine exposes them",
    "simengine/disagg_server.py": "the disaggregated engine exposes its transfer series",
    "workloads/cache_model.py": "the oracle's cache model, read from the engine's info metric",
}

#: Where the planted violation goes (a module of the diagnosis, in a copy of the tree).
PLANTED = Path("diagnose", "planted.py")
MAPPINGS = [builtin_mapping(flavour) for flavour in BUILTIN_FLAVOURS]
PREFIXES = tuple(sorted({p for m in MAPPINGS for p in (*m.detect, *m.prefix_variants)}))
NAMES = frozenset(name for m in MAPPINGS for name in m.metric_names())


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(node, kinds) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _names_a_metric(text: str) -> bool:
    return text in NAMES or any(text.startswith(p) and len(text) > len(p) for p in PREFIXES)


def violations(root: Path) -> list[str]:
    """``path:line: 'name'`` for every flavour metric a non-exempt module names."""
    found = []
    for path, tree in parsed_modules(root, packages()):
        where = path.as_posix()
        if any(where == e or (e.endswith("/") and where.startswith(e)) for e in EXEMPT):
            continue
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in prose
                and _names_a_metric(node.value)
            ):
                found.append(f"{where}:{node.lineno}: {node.value!r}")
    return found


def test_no_module_outside_the_mappings_names_a_flavour_metric() -> None:
    assert violations(ROOT) == []


def test_the_prefixes_cover_every_flavour_with_metrics() -> None:
    assert {"vllm:", "sglang:", "sglang_", "llamacpp:", "prefillscope_engine_"} <= set(PREFIXES)


def test_a_planted_name_is_found_and_a_docstring_is_not(tmp_path: Path) -> None:
    root = copy_tree(tmp_path, packages())
    planted = root / PLANTED
    planted.write_text(
        '"""Reads sglang:kv_transfer_latency_ms (prose: allowed)."""\n'
        'LATENCY = "sglang:kv_transfer_latency_ms"\n'
        'STEP = "prefillscope_engine_step_seconds"\n'
        'QUEUE = "vllm:request_queue_time_seconds"\n'
    )
    found = violations(root)
    assert found == [
        f"{PLANTED}:2: 'sglang:kv_transfer_latency_ms'",
        f"{PLANTED}:3: 'prefillscope_engine_step_seconds'",
        f"{PLANTED}:4: 'vllm:request_queue_time_seconds'",
    ]


def engine_name_importers(root: Path) -> list[str]:
    """``path:line`` of every import of ``runtime.engine_metrics`` outside its readers."""
    found = []
    for path, tree in parsed_modules(root, packages()):
        where = path.as_posix()
        for node in ast.walk(tree):
            named = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom) and node.module
                else []
            )
            reads = any(n.startswith("runtime.engine_metrics") for n in named)
            if reads and where not in ENGINE_NAME_READERS:
                found.append(f"{where}:{node.lineno}")
    return found


def test_only_the_engine_and_the_oracle_s_cache_model_import_the_engine_s_names() -> None:
    assert engine_name_importers(ROOT) == []


def test_a_diagnosis_importing_the_engine_s_names_is_found(tmp_path: Path) -> None:
    root = copy_tree(tmp_path, packages())
    (root / PLANTED).write_text("from runtime import engine_metrics\n")
    calibration = Path("session", "planted.py")
    (root / calibration).write_text("from runtime.engine_metrics import STEP_SECONDS\n")
    assert engine_name_importers(root) == [f"{PLANTED}:1", f"{calibration}:1"]
