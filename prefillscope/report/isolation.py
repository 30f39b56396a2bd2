"""The isolation result in a report: data (``isolation.json``) → content, for every view.

``prefillscope isolation`` prints it when the experiment ends, and ``prefillscope report
FOLDER`` on an isolation folder renders it on the terminal (``terminal.render_isolation``),
as a page (``html.render_isolation_html``) or as JSON (``isolation_dict``). Everything
shown comes from the document: the verdict and its rule, per prefix length the TTFT of hits
and misses within and across tenants with the gap's interval, the cached tokens the server
reported, the probes an attacker needs, and the power check of a sweep.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runfmt.isolation import CacheEvidence, Experiment, IsolationResult, Power, TtftGap
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


def load_isolation(path: str | Path) -> IsolationResult:
    """The document of an isolation folder (``InputError`` when unreadable or newer)."""
    return IsolationResult.read(RunDir(path))


def _ms(value: float | None, signed: bool = False) -> str:
    """Milliseconds, one decimal below 100 ms, none above; unmeasured: a dash."""
    if value is None or not math.isfinite(value):
        return "–"
    ms = value * 1e3
    return f"{ms:{'+' if signed else ''}.{1 if abs(ms) < 100 else 0}f}"


def _gap(ttft: TtftGap) -> str:
    low, high = _ms(ttft.ci_low_s, True), _ms(ttft.ci_high_s, True)
    text = f"{_ms(ttft.gap_s, True)} [{low}, {high}]"
    return text + (" *" if ttft.inconclusive else "")


def _cached(cache: CacheEvidence) -> str:
    if cache.fresh_cached:  # diagnose.isolation.contradiction: counts set aside
        return "set aside"
    if not cache.reported:
        return "not reported"
    return f"{cache.hits}/{cache.reported}"


def _rows(experiments: tuple[Experiment, ...]) -> list[list[str]]:
    rows = []
    for exp in experiments:
        for channel, label, verdict in (
            (exp.control, "victim", "control"),
            (exp.cross, "attacker", exp.verdict.verdict),
        ):
            ttft = channel.gap
            needed = ttft.probes_needed_95
            rows.append([
                str(exp.prefix_tokens), label, f"{_ms(ttft.hit_s)} / {_ms(ttft.miss_s)}",
                _gap(ttft), _cached(channel.cache), "–" if needed is None else str(needed),
                verdict,
            ])  # fmt: skip
    return rows


def _power(power: Power, lengths: int) -> str | None:
    if lengths < 2:
        return None
    shortest, longest = power.shortest_detectable_tokens, power.longest_undetectable_tokens
    if shortest is None:
        return "the timing channel was detectable at none of the prefix lengths tested"
    below = f"; not at {longest} tokens" if longest is not None else ""
    return f"within one tenant, a hit is detectable by timing from {shortest} prefix tokens{below}"


def _few(experiments: tuple[Experiment, ...]) -> list[str]:
    """The footnote of an interval marked ``*``: too few probes for a median to be trusted."""
    reasons = {
        str(channel.gap.inconclusive)
        for exp in experiments for channel in (exp.control, exp.cross)
        if channel.gap.inconclusive
    }  # fmt: skip
    return [f"* too few probes for the interval to be trusted: {r}" for r in sorted(reasons)]


def isolation_content(doc: IsolationResult, path: str | Path) -> IsolationContent:
    """The content of one ``isolation.json``."""
    settings, target, tenants = doc.settings, doc.target, doc.tenants
    engine = target.engine or {}
    server = (
        f"embedded engine ({engine.get('model')} on {engine.get('gpu')}, "
        f"cache scope {engine.get('cache_scope', 'tenant')})"
        if target.embedded
        else f"{target.flavour} at {target.url} ({target.model})"
    )
    fields = [
        ("target", server),
        ("victim", ", ".join(tenants.victim)),
        ("attacker", ", ".join(tenants.attacker)),
        ("trials", f"{settings.trials} per length (+{settings.warmup_trials} "
                   f"warm-up), cache {settings.cache_between_trials} between trials"),
        ("resolution", str(settings.resolution)),
        ("secret", f"{doc.secret.source} prefix, kept as a SHA-256 only"),
    ]  # fmt: skip
    name = doc.verdict.verdict
    return IsolationContent(
        path=str(path),
        title="Tenant isolation of the prefix cache",
        status=doc.status,
        verdict=name,
        tone=TONES.get(name, "muted"),
        sentence=doc.verdict.sentence,
        fields=fields,
        rows=_rows(doc.experiments),
        power=_power(doc.power, len(doc.experiments)),
        notes=_few(doc.experiments)
        + list(doc.notes)
        + ([f"stopped early: {doc.reason}"] if doc.status != "complete" else []),
    )


def isolation_dict(content: IsolationContent, html_path: str | None) -> dict[str, Any]:
    """``report --json`` of an isolation folder."""
    out = asdict(content)
    out["columns"] = COLUMNS
    out["html"] = html_path
    return out
