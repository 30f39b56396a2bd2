"""The isolation result in a report: data (``isolation.json``) → content, for every view.

``prefillscope isolation`` prints it when the experiment ends, and ``prefillscope report
FOLDER`` on an isolation folder renders it on the terminal (``terminal.render_isolation``),
as a page (``html.render_isolation_html``) or as JSON (``isolation_dict``). Everything
shown comes from the document: the verdict and its rule, per prefix length the TTFT of hits
and misses within and across tenants with the gap's interval, the cached tokens the server
reported, the probes an attacker needs, and the power check of a sweep.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runfmt.isolation import IsolationResult
from runfmt.names import ISOLATION_JSON
from runfmt.rundir import RunDir

#: The tone of each verdict (``terminal.TONE_STYLES``, the page's badge classes).
TONES = {"isolated": "good", "leaks": "bad", "inconclusive": "warn"}
COLUMNS = ["prefix", "prober", "hit/miss ms", "hit−miss ms [CI]", "cached", "n@95", "verdict"]


@dataclass
class IsolationContent:
    """What every view of one isolation result shows."""

    path: str
    title: str
    status: str
    verdict: str
    tone: str
    sentence: str
    fields: list[tuple[str, str]]
    rows: list[list[str]]
    power: str | None
    notes: list[str] = field(default_factory=list)


def is_isolation_dir(path: str | Path) -> bool:
    """Whether ``path`` is a folder ``prefillscope isolation`` wrote."""
    return (Path(path) / ISOLATION_JSON).is_file()


def load_isolation(path: str | Path) -> dict[str, Any]:
    """The document of an isolation folder (``InputError`` when unreadable or newer)."""
    return IsolationResult.read(RunDir(path)).to_json()


def _ms(value: Any, signed: bool = False) -> str:
    """Milliseconds, one decimal below 100 ms, none above."""
    if value is None:
        return "–"
    ms = value * 1e3
    return f"{ms:{'+' if signed else ''}.{1 if abs(ms) < 100 else 0}f}"


def _gap(ttft: dict[str, Any]) -> str:
    low, high = _ms(ttft.get("ci_low_s"), True), _ms(ttft.get("ci_high_s"), True)
    text = f"{_ms(ttft.get('gap_s'), True)} [{low}, {high}]"
    return text + (" *" if ttft.get("inconclusive") else "")


def _cached(cache: dict[str, Any]) -> str:
    if cache.get("fresh_cached"):  # diagnose.isolation.contradiction: counts set aside
        return "set aside"
    if not cache.get("reported"):
        return "not reported"
    return f"{cache['hits']}/{cache['reported']}"


def _rows(experiments: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for exp in experiments:
        for name, label in (("control", "victim"), ("cross", "attacker")):
            channel = exp.get(name) or {}
            ttft = channel.get("ttft") or {}
            needed = ttft.get("probes_needed_95")
            rows.append([
                str(exp.get("prefix_tokens")), label,
                f"{_ms(ttft.get('hit_s'))} / {_ms(ttft.get('miss_s'))}", _gap(ttft),
                _cached(channel.get("cached_tokens") or {}), "–" if needed is None else str(needed),
                (exp.get("verdict") or {}).get("verdict", "") if name == "cross" else "control",
            ])  # fmt: skip
    return rows


def _power(power: dict[str, Any] | None, lengths: int) -> str | None:
    if not power or lengths < 2:
        return None
    shortest, longest = (
        power.get("shortest_detectable_tokens"),
        power.get("longest_undetectable_tokens"),
    )
    if shortest is None:
        return "the timing channel was detectable at none of the prefix lengths tested"
    below = f"; not at {longest} tokens" if longest is not None else ""
    return f"within one tenant, a hit is detectable by timing from {shortest} prefix tokens{below}"


def _few(experiments: list[dict[str, Any]]) -> list[str]:
    """The footnote of an interval marked ``*``: too few probes for a median to be trusted."""
    reasons = {
        str(((exp.get(c) or {}).get("ttft") or {}).get("inconclusive"))
        for exp in experiments for c in ("control", "cross")
        if ((exp.get(c) or {}).get("ttft") or {}).get("inconclusive")
    }  # fmt: skip
    return [f"* too few probes for the interval to be trusted: {r}" for r in sorted(reasons)]


def isolation_content(doc: dict[str, Any], path: str | Path) -> IsolationContent:
    """The content of one ``isolation.json``."""
    verdict = doc.get("verdict") or {}
    settings = doc.get("settings") or {}
    target = doc.get("target") or {}
    tenants = doc.get("tenants") or {}
    engine = target.get("engine") or {}
    server = (
        f"embedded engine ({engine.get('model')} on {engine.get('gpu')}, "
        f"cache scope {engine.get('cache_scope', 'tenant')})"
        if target.get("embedded")
        else f"{target.get('flavour')} at {target.get('url')} ({target.get('model')})"
    )
    fields = [
        ("target", server),
        ("victim", ", ".join(tenants.get("victim") or [])),
        ("attacker", ", ".join(tenants.get("attacker") or [])),
        ("trials", f"{settings.get('trials')} per length (+{settings.get('warmup_trials')} "
                   f"warm-up), cache {settings.get('cache_between_trials')} between trials"),
        ("resolution", str(settings.get("resolution"))),
        ("secret", f"{(doc.get('secret') or {}).get('source')} prefix, kept as a SHA-256 only"),
    ]  # fmt: skip
    experiments = doc.get("experiments") or []
    name = verdict.get("verdict", "inconclusive")
    return IsolationContent(
        path=str(path),
        title="Tenant isolation of the prefix cache",
        status=str(doc.get("status")),
        verdict=name,
        tone=TONES.get(name, "muted"),
        sentence=str(verdict.get("sentence", "")),
        fields=fields,
        rows=_rows(experiments),
        power=_power(doc.get("power"), len(experiments)),
        notes=_few(experiments)
        + [str(n) for n in doc.get("notes") or []]
        + ([f"stopped early: {doc.get('reason')}"] if doc.get("status") != "complete" else []),
    )


def isolation_dict(content: IsolationContent, html_path: str | None) -> dict[str, Any]:
    """``report --json`` of an isolation folder."""
    out = asdict(content)
    out["columns"] = COLUMNS
    out["html"] = html_path
    return out
