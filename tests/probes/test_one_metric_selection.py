"""The metric registry owns every metric selection and every ``*_s`` JSON name
(``docs/ARCHITECTURE.md``, "A metric"), held mechanically over the installed
packages: outside ``runfmt/metrics.py`` no code types a latency statistic's name
(a string such as ``"itl_p99"`` or ``"ttft_p50_s"``: a registered latency's prefix, a
statistic the registry labels, an optional ``_s``) nor a metric's key (``"ttft_s"``,
``"requests_per_s"``: a reference to the metric, ``TTFT.key``, is one edit to rename),
and none builds a ``*_s`` name by hand (an f-string ending in ``_s`` after a formatted
value, ``f"{name}_s"``): a selection is
one of the registry's named tuples and a JSON name comes from ``json_name``. Docstrings
are prose and are not read. The check is shown failing on a violation planted in a copy
of the tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from repo_paths import ROOT
from source_tree import copy_tree, docstrings, packages, parsed_modules

from runfmt.metrics import DISPATCH_LAG, STALLS, STAT_LABELS, THROUGHPUTS, latencies

#: The one module allowed to name metric statistics.
OWNER = Path("runfmt", "metrics.py")
_PREFIXES = "|".join(m.prefix for m in (*latencies(), DISPATCH_LAG))
_KEYS = "|".join(m.key for m in (*latencies(), DISPATCH_LAG, *THROUGHPUTS, *STALLS))
#: A latency statistic's name, as a consumer would type it: ``itl_p99``, ``ttft_p50_s``;
#: or a metric's key: ``ttft_s``, ``output_tokens_per_s``.
STAT_NAME = re.compile(rf"^(({_PREFIXES})_({'|'.join(STAT_LABELS)})(_s)?|{_KEYS})$")
#: A string equal to a metric key that names another fact, with its reason: the
#: ``StallEvents`` attribute that holds each long prompt's TTFT (a Python field's name).
OTHER_FACTS = {
    (Path("probes", "stall_events.py"), "ttft_s"),
    (Path("diagnose", "ab_events.py"), "ttft_s"),
}


def _hand_built(node: ast.JoinedStr) -> bool:
    """``f"{name}_s"``, ``f"{metric}_mean_s"``: a name ending in ``_s`` after a value."""
    *head, last = node.values
    return (
        any(isinstance(p, ast.FormattedValue) for p in head)
        and isinstance(last, ast.Constant)
        and isinstance(last.value, str)
        and last.value.endswith("_s")
    )


def _file_violations(tree: ast.Module, where: Path) -> set[str]:
    skip = docstrings(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and _hand_built(node):
            found.add(f"{where}:{node.lineno}: builds a *_s name ({ast.unparse(node)})")
            skip |= {id(v) for v in node.values}
    for node in ast.walk(tree):
        text = node.value if isinstance(node, ast.Constant) else None
        if (
            isinstance(text, str)
            and id(node) not in skip
            and STAT_NAME.match(text)
            and (where, text) not in OTHER_FACTS
        ):
            found.add(f"{where}:{node.lineno}: names {text!r}")
    return found


def violations(root: Path) -> list[str]:
    """``path:line: what`` for each metric statistic named and each ``*_s`` name built
    outside the registry in the packages under ``root``."""
    found: set[str] = set()
    for where, tree in parsed_modules(root, packages()):
        if where != OWNER:
            found |= _file_violations(tree, where)
    return sorted(found)


def test_no_metric_selection_or_json_name_is_typed_outside_the_registry() -> None:
    assert violations(ROOT) == []


def test_the_check_fails_on_a_planted_violation(tmp_path: Path) -> None:
    copy_tree(tmp_path, packages())
    planted = Path("diagnose", "planted.py")
    (tmp_path / planted).write_text(
        '"""Shows itl_p99 (a docstring is prose)."""\n\nSHOWN = ("itl_p99",)\n'
    )
    assert violations(tmp_path) == [f"{planted}:3: names 'itl_p99'"]


def test_the_check_fails_on_a_metric_key_typed(tmp_path: Path) -> None:
    copy_tree(tmp_path, packages())
    planted = Path("session", "planted.py")
    (tmp_path / planted).write_text('def ttft(row):\n    return row["ttft_s"]\n')
    assert violations(tmp_path) == [f"{planted}:2: names 'ttft_s'"]


def test_the_check_fails_on_a_name_built_by_hand(tmp_path: Path) -> None:
    copy_tree(tmp_path, packages())
    planted = Path("prefillscope", "planted.py")
    (tmp_path / planted).write_text("def key(name):\n    return f'{name}_s'\n")
    assert violations(tmp_path) == [f"{planted}:2: builds a *_s name (f'{{name}}_s')"]


def test_the_run_format_s_client_section_is_keyed_as_the_registry_names_it() -> None:
    """runfmt's client section keys its dispatch lag p99 by the name ``runfmt.metrics``
    gives it: read and written under the registry's name."""
    from runfmt.codec import decode, encode
    from runfmt.metrics import CLIENT_DISPATCH_LAG, json_name
    from runfmt.summary_sections import ClientSection

    name = json_name(CLIENT_DISPATCH_LAG)
    section = decode(ClientSection, {name: 0.25})
    assert section.dispatch_lag_p99_s == 0.25 and encode(section) == {name: 0.25}
