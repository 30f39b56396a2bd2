"""The canonical server series have one owner, ``runfmt/series.py``
(``docs/ARCHITECTURE.md``), held mechanically over the installed packages: outside it no
code types a series' name as a string (``"kv_usage"``, ``"queue_time"``: a reference,
``Series.KV_USAGE``, is one edit to rename) nor builds one by hand
(``f"hits_tier_{tier}"``: ``hit_tier(tier)``, ``step_time(kind)``, ``step_tokens(kind)``).

A few names are homonyms, spelled like another fact the code names rightly (``HOMONYMS``:
a run's status ``"running"``, a request's ``"prompt_tokens"`` column …): those are held
only where they are read as a series — an argument of a server-series reader
(``increase``, ``level``, ``latest`` …), a key into a scrape's ``series``,
``histograms`` or ``sources``, or the whole value of a module's constant (``TTFT =
"ttft"``, the way a reader names the series it reads). Docstrings are prose and are not
read. The check is shown failing on violations planted in a copy of the tree."""

from __future__ import annotations

import ast
from pathlib import Path

from repo_paths import ROOT
from source_tree import copy_tree, docstrings, packages, parsed_modules

from runfmt.series import HISTOGRAMS, SERIES

#: The one module allowed to name the canonical series.
OWNER = Path("runfmt", "series.py")
NAMES = frozenset(map(str, (*SERIES, *HISTOGRAMS)))
#: Series names spelled like another fact, and what that fact is.
HOMONYMS = {
    "running": "a run's status",
    "prompt_tokens": "a request's column, the OpenAI usage field, the workload's statistic",
    "block_size": "an engine or simulator setting",
    "ttft": "vLLM's --percentile-metrics word, runfmt.metrics' prefix, isolation.json's key",
    "itl": "vLLM's --percentile-metrics word, runfmt.metrics' prefix",
    "e2e": "runfmt.metrics' prefix, an --slo word",
}
#: A string equal to a series name that names another fact, with its reason: the
#: embedded engine's own metric names (``runtime`` is below ``runfmt`` and names what the
#: engine publishes, which its mapping then translates), the workload's pool statistics,
#: and the report's label for the server's preemption count.
OTHER_FACTS = {
    (Path("runtime", "engine_metrics.py"), "prefix_evictions"),
    (Path("runtime", "engine_metrics.py"), "kv_transfer_queue_depth"),
    (Path("workloads", "stats.py"), "num_blocks"),
    (Path("prefillscope", "report", "content.py"), "preemptions"),
    (Path("runfmt", "sweep_search.py"), "running"),  # a sweep point's status
}
#: What reads a series by its name: ``ServerSeries``' readers, the server summary's
#: histogram helpers, and the keyed parts of a scrape (``Snapshot``).
READERS = frozenset(
    {"increase", "rate", "level", "latest", "histogram_increase"}
    | {"_histogram", "_plain_histogram", "_published"}
)
KEYED = frozenset({"series", "histograms", "sources"})
#: The series named from a variable part: ``hits_tier_<tier>``, ``step_time_<kind>`` …
BUILT = ("hits_tier_", "step_time_", "step_tokens_")


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _series_reads(tree: ast.Module) -> set[int]:
    """The ids of the constants a server-series reader or a scrape's keyed part is given."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = _name(node.func)
            if func == "get" and isinstance(node.func, ast.Attribute):
                keyed = _name(node.func.value) in KEYED
            else:
                keyed = func in READERS
            if keyed:
                out |= {id(a) for a in node.args if isinstance(a, ast.Constant)}
        elif isinstance(node, ast.Subscript) and _name(node.value) in KEYED:
            out.add(id(node.slice))
    return out


def _constants(tree: ast.Module) -> set[int]:
    """The ids of the constants a module binds whole to a name (``TTFT = "ttft"``,
    ``A, B = "x", "y"``)."""
    out = set()
    for node in tree.body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        value, target = node.value, node.targets[0] if isinstance(node, ast.Assign) else None
        pairs = isinstance(value, ast.Tuple) and isinstance(target, ast.Tuple)
        out |= {id(v) for v in (value.elts if pairs else [value])}
    return out


def _file_violations(tree: ast.Module, where: Path) -> set[str]:
    skip, reads = docstrings(tree), _series_reads(tree) | _constants(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            if (
                isinstance(head, ast.Constant)
                and isinstance(head.value, str)
                and head.value.startswith(BUILT)
            ):
                found.add(f"{where}:{node.lineno}: builds a series name ({ast.unparse(node)})")
            skip |= {id(v) for v in node.values}
    for node in ast.walk(tree):
        text = node.value if isinstance(node, ast.Constant) else None
        if not isinstance(text, str) or text not in NAMES or id(node) in skip:
            continue
        if (where, text) in OTHER_FACTS or (text in HOMONYMS and id(node) not in reads):
            continue
        found.add(f"{where}:{node.lineno}: names {text!r}")
    return found


def violations(root: Path) -> list[str]:
    """``path:line: what`` for each canonical series named or built outside its owner in
    the packages under ``root``."""
    found: set[str] = set()
    for where, tree in parsed_modules(root, packages()):
        if where != OWNER:
            found |= _file_violations(tree, where)
    return sorted(found)


def test_no_canonical_series_is_named_outside_its_owner() -> None:
    assert violations(ROOT) == []


def test_the_check_fails_on_a_planted_series_name(tmp_path: Path) -> None:
    copy_tree(tmp_path, packages())
    planted = Path("diagnose", "planted.py")
    (tmp_path / planted).write_text(
        '"""Reads kv_usage (a docstring is prose)."""\n\n'
        "def usage(series):\n"
        '    return series.level("kv_usage")\n\n'
        'QUEUE = "queue_time"\n'
    )
    assert violations(tmp_path) == [
        f"{planted}:4: names 'kv_usage'",
        f"{planted}:6: names 'queue_time'",
    ]


def test_the_check_fails_on_a_homonym_read_as_a_series(tmp_path: Path) -> None:
    """``"running"`` as a run's status passes; read from the server's series it fails."""
    copy_tree(tmp_path, packages())
    planted = Path("session", "planted.py")
    (tmp_path / planted).write_text(
        'TTFT = "ttft"\n'
        "def busy(result, series, snapshot):\n"
        '    done = result.status == "running"\n'
        '    return done, series.level("running").p50, snapshot.series["block_size"]\n'
    )
    assert violations(tmp_path) == [
        f"{planted}:1: names 'ttft'",
        f"{planted}:4: names 'block_size'",
        f"{planted}:4: names 'running'",
    ]


def test_the_check_fails_on_a_series_name_built_by_hand(tmp_path: Path) -> None:
    copy_tree(tmp_path, packages())
    planted = Path("probes", "planted.py")
    (tmp_path / planted).write_text(
        "def tier(series, name):\n    return series.increase(f'hits_tier_{name}')\n"
    )
    assert violations(tmp_path) == [f"{planted}:2: builds a series name (f'hits_tier_{{name}}')"]


def test_every_homonym_and_other_fact_is_a_series_name() -> None:
    """An exemption for a name that is no longer a series would hide nothing: drop it."""
    assert set(HOMONYMS) <= NAMES and {name for _, name in OTHER_FACTS} <= NAMES
