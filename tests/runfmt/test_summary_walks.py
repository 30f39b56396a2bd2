"""``runfmt`` owns the reading of ``summary.json``'s sections (``docs/ARCHITECTURE.md``,
"The run format"): outside ``runfmt/`` a reader takes ``Summary.typed`` (or
``SummarySections.of`` a summary's dict) and never walks the dicts. Held mechanically over
the installed packages, by the source's names (the check reads no types):

* no ``.get("<section>")`` or ``["<section>"]`` read on an expression that names a summary
  (``summary.get("client")``, ``(summary or {}).get("errors")``,
  ``outcome.summary["requests"]``), a section being any of ``Summary``'s or
  ``SummarySections``' fields;
* no raw section taken off a summary by attribute (``run.summary.client``: ``Summary``
  keeps its sections as dicts, for writing);
* no dotted-path walk: no call of a function named ``lookup``, none given a path such as
  ``"client.dispatch_lag_p99_s"``, nor a section and a key as two strings to a ``get`` or
  beside a summary (``get("throughput", "requests_per_s")``, ``walk(summary, "client",
  "limited")``).

A write (``summary["server"] = …``) is no read. The rules read names, so a variable that
holds typed sections is not called ``summary`` (``sections``). Each rule is shown failing on a
violation planted in a copy of the tree."""

from __future__ import annotations

import ast
import itertools
import re
from dataclasses import fields
from pathlib import Path

from repo_paths import ROOT
from source_tree import copy_tree, packages, parsed_modules

from runfmt.summary import Summary, SummarySections

#: The summary's sections: those ``Summary`` declares (its raw dicts) and those its typed
#: view reads (``error_messages``, ``usage_suspect``, ``percentiles`` … from ``extra``).
RAW_SECTIONS = {f.name for f in fields(Summary)} - {"extra", "order", "format_version"}
SECTIONS = RAW_SECTIONS | ({f.name for f in fields(SummarySections)} - {"raw"})
DOTTED = re.compile(rf"^({'|'.join(sorted(SECTIONS))})\.\w")
KEY = re.compile(r"^\w+$")
#: Modules another change of the same issue routes through the typed sections, with what
#: they still read raw; a new violation anywhere else fails.
PENDING: dict[Path, str] = {}


def _names_a_summary(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        name = sub.id if isinstance(sub, ast.Name) else getattr(sub, "attr", None)
        if isinstance(name, str) and "summary" in name.lower():
            return True
    return False


def _last_name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)


def _text(node: ast.AST) -> str | None:
    value = node.value if isinstance(node, ast.Constant) else None
    return value if isinstance(value, str) else None


def _violation(node: ast.AST) -> str | None:
    """What ``node`` does against the rules of the module docstring, if anything."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        key = _text(node.slice)
        if key in SECTIONS and _names_a_summary(node.value):
            return f'reads summary["{key}"] raw'
    attribute = isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
    if attribute and node.attr in RAW_SECTIONS and _last_name(node.value) == "summary":
        return f"takes the raw {node.attr} section off a summary"
    if not isinstance(node, ast.Call):
        return None
    func, texts = node.func, [_text(a) for a in node.args]
    first = texts[0] if texts else None
    getter = isinstance(func, ast.Attribute) and func.attr == "get"
    if getter and first in SECTIONS and _names_a_summary(func.value):
        return f'reads summary.get("{first}") raw'
    if _last_name(func) == "lookup":
        return "walks a dotted path (lookup)"
    if any(t is not None and DOTTED.match(t) for t in texts):
        return "walks a dotted path through a summary section"
    pairs = itertools.pairwise(texts)
    path = any(a in SECTIONS and b is not None and KEY.match(b) for a, b in pairs)
    if path and (_last_name(func) == "get" or any(map(_names_a_summary, node.args))):
        return "walks a summary section's key path"
    return None


def violations(root: Path) -> list[str]:
    """``path:line: what`` for each raw walk over a summary's sections outside ``runfmt/``
    (and the ``PENDING`` modules) in the packages under ``root``."""
    found = set()
    tops = [p for p in packages() if p != "runfmt"]
    for where, tree in parsed_modules(root, tops):
        if where in PENDING:
            continue
        for node in ast.walk(tree):
            what = _violation(node)
            if what:
                found.add(f"{where}:{node.lineno}: {what}")
    return sorted(found)


def test_no_summary_section_is_walked_raw_outside_runfmt() -> None:
    assert violations(ROOT) == []


def test_each_rule_fails_on_a_planted_violation(tmp_path: Path) -> None:
    copy_tree(tmp_path, packages())
    planted = Path("prefillscope", "planted.py")
    (tmp_path / planted).write_text(
        "from prefillscope.report.data import lookup\n\n\n"
        "def figures(run, summary, outcome):\n"
        "    summary['server'] = {}\n"
        "    lag = summary.get('client')\n"
        "    failed = (summary or {}).get('errors')\n"
        "    kept = outcome.summary['requests']\n"
        "    raw = run.summary.prefix\n"
        "    typed = run.summary.typed.prefix\n"
        "    rate = lookup(summary, 'throughput.window_s')\n"
        "    rps = walk(summary, 'throughput', 'requests_per_s')\n"
        "    p99 = fetch(summary, 'client.dispatch_lag_p99_s')\n"
        "    return lag, failed, kept, raw, typed, rate, rps, p99, summary.get('x', 'y')\n"
    )
    assert violations(tmp_path) == [
        f"{planted}:11: walks a dotted path (lookup)",
        f"{planted}:12: walks a summary section's key path",
        f"{planted}:13: walks a dotted path through a summary section",
        f'{planted}:6: reads summary.get("client") raw',
        f'{planted}:7: reads summary.get("errors") raw',
        f'{planted}:8: reads summary["requests"] raw',
        f"{planted}:9: takes the raw prefix section off a summary",
    ]


def test_one_walk_planted_in_the_report_is_the_one_reported(tmp_path: Path) -> None:
    copy_tree(tmp_path, packages())
    content = tmp_path / "prefillscope" / "report" / "content.py"
    text = content.read_text()
    content.write_text(text + "\n\ndef lag(summary):\n    return summary.get('client')\n")
    line = text.count("\n") + 4
    assert violations(tmp_path) == [
        f'{Path("prefillscope", "report", "content.py")}:{line}: reads summary.get("client") raw'
    ]
