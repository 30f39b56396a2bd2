"""``runfmt`` owns the reading of ``run.json``'s sections (``docs/ARCHITECTURE.md``, "The run
format"): outside ``runfmt/`` a reader takes ``RunInfo.typed`` (``runfmt.runinfo_sections``)
and never walks the dicts the bench fills in. Held mechanically over the installed
packages, by the source's names (the check reads no types): on a typed section's raw dict
taken off something whose name says it is a run's info (``info.target``,
``view.info.oracle``, ``self.info.probes``), no ``.get(…)``, no ``[…]`` read, no
``.items()``/``.keys()``/``.values()`` and no ``for`` over it.

A write is no read: ``info.load["workers"] = n`` and ``info.probes["prometheus"]["status"]
= …`` (the bench writing its own run.json) pass, as does handing a section on for the
writer to fill (``report=self.info.load``). Each rule is shown failing on a violation
planted in a copy of the tree, and the typed sections are read off real run.json files."""

from __future__ import annotations

import ast
import json
from dataclasses import fields
from pathlib import Path

from repo_paths import ROOT
from source_tree import copy_tree, packages, parsed_modules

from runfmt.runinfo import RunInfo
from runfmt.runinfo_sections import RunInfoSections

#: The sections ``RunInfo.typed`` types (its raw dicts, by ``RunInfo``'s field names).
SECTIONS = {f.name for f in fields(RunInfoSections)}
VIEWS = {"items", "keys", "values", "get"}


def _last_name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)


def _raw_section(node: ast.AST) -> str | None:
    """The section's name when ``node`` is ``<…info>.<section>``."""
    if not isinstance(node, ast.Attribute) or node.attr not in SECTIONS:
        return None
    owner = _last_name(node.value)
    return node.attr if owner is not None and "info" in owner.lower() else None


def _written(tree: ast.AST) -> set[int]:
    """The ids of the subscripts a write goes through (``a.b["x"]["y"] = …``: both)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            inner = node.value
            while isinstance(inner, ast.Subscript):
                out.add(id(inner))
                inner = inner.value
    return out


def _violations(tree: ast.AST) -> list[tuple[int, str]]:
    written = _written(tree)
    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Subscript) and id(node) not in written:
            if isinstance(node.ctx, ast.Load) and (section := _raw_section(node.value)):
                what = f"reads info.{section}[…] raw"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in VIEWS and (section := _raw_section(node.func.value)):
                what = f"reads info.{section}.{node.func.attr}() raw"
        elif isinstance(node, ast.For | ast.comprehension) and (section := _raw_section(node.iter)):
            what = f"iterates info.{section} raw"
        if what:
            line = node.iter.lineno if isinstance(node, ast.comprehension) else node.lineno
            found.append((line, what))
    return found


def violations(root: Path) -> list[str]:
    """``path:line: what`` for each raw read of a typed run.json section outside ``runfmt/``."""
    tops = [p for p in packages() if p != "runfmt"]
    return sorted(
        f"{where}:{line}: {what}"
        for where, tree in parsed_modules(root, tops)
        for line, what in _violations(tree)
    )


def test_no_run_json_section_is_walked_raw_outside_runfmt() -> None:
    assert violations(ROOT) == []


def test_each_rule_fails_on_a_planted_violation(tmp_path: Path) -> None:
    copy_tree(tmp_path, packages())
    planted = Path("diagnose", "planted.py")
    (tmp_path / planted).write_text(
        "def figures(info, view, self, pool):\n"
        "    info.load['workers'] = 2\n"
        "    info.probes['prometheus']['status'] = {}\n"
        "    pool(report=info.load)\n"
        "    url = info.target.get('url')\n"
        "    blocks = view.info.oracle['num_blocks']\n"
        "    names = [k for k, v in self.info.probes.items()]\n"
        "    for name in info.probes:\n"
        "        pass\n"
        "    typed = info.typed.target.url\n"
        "    other = spec.load.rate\n"
        "    return url, blocks, names, typed, other\n"
    )
    assert violations(tmp_path) == [
        f"{planted}:5: reads info.target.get() raw",
        f"{planted}:6: reads info.oracle[…] raw",
        f"{planted}:7: reads info.probes.items() raw",
        f"{planted}:8: iterates info.probes raw",
    ]


def test_the_typed_sections_read_a_real_run_json() -> None:
    """The golden run's run.json, typed: each field is the value its dict holds."""
    doc = json.loads((ROOT / "tests/fixtures/golden_v2/run/run.json").read_text())
    typed = RunInfo.from_json(doc).typed
    target = doc["target"]
    assert (typed.target.url, typed.target.flavour, typed.target.model) == (
        target.get("url"),
        target.get("flavour"),
        target.get("model"),
    )
    assert typed.oracle.block_size == doc["oracle"]["block_size"]
    assert typed.plan.concurrency == doc["plan"].get("concurrency")
    assert [p.name for p in typed.probes] == list(doc["probes"])
    for probe in typed.probes:
        recorded = (doc["probes"][probe.name] or {}).get("status") or {}  # prometheus: None
        assert probe.status.state == recorded.get("state")
        assert dict(probe.status.recorded) == recorded
    assert typed.cache_protocol == (doc.get("cache_protocol") or {}).get("applied")


def test_a_partial_or_hand_edited_run_json_reads_as_absent() -> None:
    """Missing sections, and values of the wrong JSON type, read as ``None``/empty."""
    empty = RunInfo.from_json({}).typed
    assert empty.target.url is None and empty.target.engine is None
    assert empty.plan.offered_rate_per_s is None and empty.oracle.num_blocks is None
    assert list(empty.probes) == [] and empty.probes.server_metrics is None
    assert dict(empty.slo) == {} and empty.cache_protocol is None
    odd = RunInfo.from_json(
        {
            "target": {"url": 3, "vocab_size": "32000", "engine": "on"},
            "oracle": {"block_size": True, "num_blocks": 12.0},
            "slo": {"ttft_s": 0.5, "itl_s": "fast"},
            "probes": {"server_metrics": {"status": "ok", "flavour": "vllm"}},
        }
    ).typed
    assert (odd.target.url, odd.target.vocab_size, odd.target.engine) == (None, None, None)
    assert (odd.oracle.block_size, odd.oracle.num_blocks) == (None, 12)
    assert dict(odd.slo) == {"ttft_s": 0.5}
    metrics = odd.probes.server_metrics
    assert metrics is not None and metrics.flavour == "vllm" and metrics.status.state is None
