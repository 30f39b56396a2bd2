"""The report's words and numbers, independent of how they are drawn.

The HTML page and the terminal view show the same header, tables and diagnosis; this
module turns ``ReportData`` into rows of display strings once, so the two renderers
differ only in markup and can never disagree on a figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from prefillscope.report.data import ReportData
from prefillscope.report.figures import group_kinds
from prefillscope.report.numbers import (
    UNKNOWN,
    fmt_count,
    fmt_duration,
    fmt_rate,
    fmt_share,
    fmt_value,
    known_number,
)
from probes.engine_pace import late_warning
from probes.stall_events import STALL_FACTOR
from runfmt.metrics import (
    E2E,
    E2E_SENT,
    ITL,
    STALLS,
    STAT_LABELS,
    TPOT,
    TTFT,
    TTFT_SENT,
    by_key,
    json_name,
    latencies,
)
from runfmt.runinfo import RunInfo
from runfmt.summary import Summary
from runfmt.summary_sections import Distribution
from runfmt.summary_server import Histogram, Level, Reading, ServerSection
from runtime.quantiles import STATISTICS, quantiles


def latency_metrics() -> list[tuple[str, str, str]]:
    """(summary key, label, short label for narrow terminals) of each registered latency
    the report shows."""
    return [(m.key, m.label, m.short) for m in latencies() if m.reported]


#: The client's rows when a ``--max-concurrency`` cap queued requests: TTFT and E2E from
#: the actual send first, as ``vllm bench serve`` times them (after the slot), then from
#: the intended send (the slot's wait included).
CAPPED_LATENCY_METRICS = (
    (TTFT_SENT.key, "TTFT (from actual send, as vllm bench serve)", "TTFT (sent, as vLLM)"),
    (TTFT.key, "TTFT (from intended send, incl. slot wait)", "TTFT (intended)"),
    (ITL.key, ITL.label, ITL.short),
    (TPOT.key, TPOT.label, TPOT.short),
    (E2E_SENT.key, "E2E (from actual send, as vllm bench serve)", "E2E (sent, as vLLM)"),
    (E2E.key, "E2E (from intended send, incl. slot wait)", "E2E (intended)"),
)
#: (statistic, column heading) of the latency table: every statistic, named as the
#: registry writes it.
QUANTILE_COLUMNS = tuple((stat, STAT_LABELS[stat]) for stat in STATISTICS)

#: Diagnosis statuses → a tone both renderers map to a colour.
STATUS_TONES = {
    "supported": "bad",
    "weakened": "mild",
    "not supported": "good",
    "inconclusive": "warn",
    "not applicable": "muted",
    "as expected": "good",
    "thrashing": "bad",
    "caching off": "bad",
    "identity mismatch": "bad",
    UNKNOWN: "muted",
}
RUN_STATUS_TONES = {"complete": "good", "interrupted": "warn", "running": "warn", "failed": "bad"}


# -- header ------------------------------------------------------------------------------
@dataclass
class Header:
    title: str
    status: str
    status_tone: str
    status_note: str | None
    fields: list[tuple[str, str]]


#: Embedded-engine settings worth a line in the header when set (a planted cause is one).
ENGINE_FIELDS = (
    "max_num_batched_tokens",
    "block_size",
    "num_gpu_blocks",
    "gpu",
    "host_overhead_step_s",
    "host_overhead_per_seq_s",
)


#: Header fields shown as "unknown" when run.json lacks them (the rest are left out).
ALWAYS = ("target", "flavour", "model", "workload", "seed", "duration")


def header(data: ReportData) -> Header:
    """Who was measured, with what, and whether the run finished (``run.json`` as
    ``runfmt.runinfo`` writes it)."""
    info = data.info or RunInfo.from_json({})
    workload_text = info.workload_name or UNKNOWN
    wall = known_number(info.wall_t0)
    started = datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if wall else None
    target = info.target
    engine = target.engine or {}
    engine_text = ", ".join(f"{k}={engine[k]}" for k in ENGINE_FIELDS if engine.get(k))
    fields = [
        ("target", target.url),
        ("flavour", target.flavour),
        ("model", target.model),
        ("engine", engine_text or None),
        ("workload", workload_text),
        ("seed", info.seed),
        ("cache protocol", info.cache_protocol.applied),
        ("requests", fmt_count(len(data.requests))),
        ("started", started),
        ("duration", fmt_duration(data.sections.throughput.window_s)),
        ("command", _given(list(info.command))),
        ("run directory", str(data.path)),
        ("prefillscope", info.tool_version if data.info is not None else None),
    ]
    status = data.status
    finished = f"the {len(data.requests):,} requests that finished before it stopped"
    notes = {
        "interrupted": f"This run was interrupted: everything below covers only {finished}.",
        "running": f"This run never finished (it was killed): everything below covers {finished}.",
        "failed": "This run failed: " + fmt_value(_given(info.reason)),
    }
    return Header(
        f"prefillscope report — {workload_text}",
        status,
        RUN_STATUS_TONES.get(status, "muted"),
        notes.get(status),
        [(name, _text(value)) for name, value in fields if value is not None or name in ALWAYS],
    )


def _given(value: Any) -> Any:
    """``value``, or ``None`` when it is empty (a header field that says nothing)."""
    return None if value in (None, "", [], {}) else value


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return fmt_value(value)


# -- summary -----------------------------------------------------------------------------
#: Server-side histograms of the summary's ``server`` section, shown under the client's.
SERVER_LATENCY = (
    (TTFT.key, "server TTFT (histogram)", "srv TTFT"),
    (ITL.key, "server ITL (histogram)", "srv ITL"),
    (E2E.key, "server E2E (histogram)", "srv E2E"),
)


def latency_table(summary: Summary, *, short: bool = False) -> list[list[str]]:
    """Rows of ``[metric, mean, p50, …, p99.9, count]``: the client's distributions from
    ``summary.json``, then the server's own histograms where it exposed them."""
    sections = summary
    server = sections.server or ServerSection()
    client = CAPPED_LATENCY_METRICS if capped(sections) else latency_metrics()
    sources = [(sections.latency, client), (server.latency, SERVER_LATENCY)]
    rows = []
    for latency, metrics in sources:
        for key, label, short_label in metrics:
            stats = latency(key)
            if stats is None or stats.count is None:
                continue
            if key == ITL.key and stats.per:
                label += f", per {stats.per}"
            cells = [histogram_cell(stats, col, short) for col, _ in QUANTILE_COLUMNS]
            if stats.quantiles is not None:
                cut = any(cell.endswith("*") for cell in cells)
                label = label.replace("(histogram", "(histogram buckets")
                label += "; * \u2264 client max" if cut else ""
            rows.append([short_label if short else label, *cells, fmt_count(stats.count)])
    return rows


def capped(summary: Summary) -> bool:
    """Whether a ``--max-concurrency`` cap held requests back (``summary.client``)."""
    return summary.client.concurrency_wait is not None


def histogram_cell(stats: Distribution | Histogram, column: str, short: bool = False) -> str:
    """A statistic; a server histogram's quantile as the bounds it lies within (``2.5 s–5 s``,
    or only ``≤ 5 s`` when ``short``; ``> 10 s`` past the last bucket), ``*`` when the upper
    end is the client's maximum, not a bucket's."""
    detail = (stats.quantiles or {}).get(column)
    if detail is None:
        return fmt_duration(stats.get(column))
    low, high = detail.low, detail.high
    cut = "*" if detail.cut else ""
    if high is None:
        return f"> {fmt_duration(low)}"
    if short or not low:
        return f"\u2264 {fmt_duration(high)}{cut}"
    if low == high:  # a bucket wholly above the client's maximum: that maximum bounds it
        return f"{fmt_duration(high)}{cut}"
    return f"{fmt_duration(low)}\u2013{fmt_duration(high)}{cut}"


#: The stall table's columns (``stall_rows``).
STALL_COLUMNS = ["per long prefill", "mean", "95 % CI", "worst", "events"]


def stall_rows(summary: Summary) -> list[list[str]]:
    """``summary.json``'s ``stalls`` (``probes.stall_events``): per stall metric its mean
    over the long prefills, the interval, the worst event and the events; none for a run
    of one request kind."""
    stalls = summary.stalls
    if stalls is None:
        return []
    rows = []
    figures = stalls.figures
    for metric in STALLS:
        low, high = figures.get(json_name(metric.prefix, part="interval")) or (None, None)
        interval = UNKNOWN if low is None else f"{fmt_duration(low)}\u2013{fmt_duration(high)}"
        rows.append(
            [
                metric.label,
                metric.format(figures.get(json_name(metric.prefix, part="mean"))),
                interval,
                metric.format(figures.get(json_name(metric.prefix, part="max"))),
                fmt_count(stalls.events),
            ]
        )
    return rows


def stall_note(summary: Summary) -> str | None:
    """Which requests the stall events are, and whether the pooled ITL p99 sees them."""
    stalls = summary.stalls
    if stalls is None:
        return None
    seen = "sees" if stalls.seen_by_itl_p99 else "cannot see"
    normal = fmt_duration(stalls.normal_gap_s)
    return (
        f"{fmt_count(stalls.events)} {stalls.kind} prefills beside decode "
        f"streams; stall gaps (over {STALL_FACTOR:g}\u00d7 the {normal} normal gap) are "
        f"{fmt_share(stalls.stall_gap_share)} of all gaps: the pooled ITL p99 {seen} them"
    )


def latency_legend(rows: list[list[str]]) -> list[str]:
    """What the abbreviations of the latency rows as shown (``latency_table``'s, short or
    not) stand for, one item each: a short label (``TTFT (sent) = from actual send``),
    the server rows' ``srv``, a bucket bound (``≤ 20 ms``) and the ``*`` mark; empty when
    nothing shown is abbreviated."""
    full = {short: label for _, label, short in (*latency_metrics(), *SERVER_LATENCY)}
    items: list[str] = []
    for row in rows:
        short = row[0] if row else ""
        label = full.get(short)
        if label is None or label == short:
            continue
        if short.startswith("srv "):
            item = "srv = the server's own histogram"
        elif label.startswith(short.split(" (")[0]):
            item = f"{short} = {label[len(short.split(' (')[0]) :].strip(' ()')}"
        else:
            item = f"{short} = {label}"
        if item not in items:
            items.append(item)
    cells = [cell for row in rows for cell in row[1:]]
    if any(cell.startswith("\u2264 ") for cell in cells):
        items.append("\u2264 x = in the bucket up to x")
    if any(cell.endswith("*") for cell in cells):
        items.append("* = up to the client's largest value")
    return items


def latency_columns() -> list[str]:
    return ["metric"] + [name for _, name in QUANTILE_COLUMNS] + ["count"]


def headline(summary: Summary) -> list[tuple[str, str]]:
    """The run's outcome in a few figures: counts, throughput, cache, client health."""
    s = summary
    limited = s.client.limited
    return [
        ("completed", fmt_count(s.requests.completed)),
        ("failed", fmt_count(s.requests.failed)),
        ("requests/s", fmt_rate(s.throughput.requests_per_s, "req/s")),
        ("output tokens/s", fmt_rate(s.throughput.output_tokens_per_s, "tok/s")),
        ("prefix hit rate (oracle)", fmt_share(s.prefix.expected_hit_rate)),
        ("prefix hit rate (observed)", fmt_share(s.prefix.observed_hit_rate)),
        ("dispatch lag p99", fmt_duration(s.client.dispatch_lag_p99_s)),
        *concurrency_wait_rows(s),
        ("client-limited", UNKNOWN if limited is None else fmt_value(bool(limited))),
        *goodput_rows(s),
    ]


def picked_label(column: str) -> str:
    """The row label of a percentile picked with ``--percentile-metrics`` (its summary
    key is the column it was read from, ``probes.percentiles.METRICS``)."""
    if column == "concurrency_wait_s":
        return "client queue (--max-concurrency slot wait)"
    try:
        return by_key(column).label
    except KeyError:
        return column


def concurrency_wait_rows(summary: Summary) -> list[tuple[str, str]]:
    """How long requests waited for a ``--max-concurrency`` slot, when any did: the
    server's pace queued them (counted in TTFT and E2E and in the dispatch lag)."""
    waited = summary.client.concurrency_wait
    wait = waited.get("p99") if waited is not None else None
    if wait is None:
        return []
    return [("concurrency-slot wait p99", fmt_duration(wait))]


def goodput_rows(summary: Summary) -> list[tuple[str, str]]:
    """Goodput and the SLO it was judged by, when the run had one."""
    goodput = summary.goodput
    if goodput is None:
        return []
    slo = goodput.slo
    names = {metric.key: metric.short for metric in latencies()}  # SLO keys: latency keys
    targets = ", ".join(f"{names.get(k, k)} \u2264 {fmt_duration(v)}" for k, v in slo.bounds())
    share = fmt_share(goodput.share)
    rate = fmt_rate(goodput.requests_per_s, "req/s")
    return [("goodput (meets every SLO)", f"{share} · {rate}"), ("SLO", targets or UNKNOWN)]


def client_warning(summary: Summary) -> str | None:
    """When the client, not the server, shaped the run: say so and why, up front."""
    client = summary.client
    if not client.limited:
        return None
    reasons = "; ".join(client.reasons)
    return (
        "The client limited this run"
        + (f" ({reasons})" if reasons else "")
        + ": latencies may include the load generator's own delays."
    )


#: The server counting more first tokens than this run sent, by this share (and by two
#: at least: a request in flight at each edge of the window), means other clients'
#: requests are in the server's rows.
MIXED_TRAFFIC_SHARE = 0.1


def server_share(summary: Summary) -> tuple[int, int] | None:
    """(first tokens this run received, first tokens the server's TTFT histogram counted
    over the same seconds), when the server exposed that histogram."""
    sections = summary
    server = sections.server or ServerSection()
    mine, counted = sections.latency(TTFT.key), server.latency(TTFT.key)
    if mine is None or counted is None or not mine.count or not counted.count:
        return None
    return int(mine.count), int(counted.count)


def mixed_traffic_warning(summary: Summary) -> str | None:
    """When the server counted clearly more requests than this run sent: its rows (and
    every server figure) mix in other clients' traffic; say how much of it was this run's."""
    share = server_share(summary)
    if share is None:
        return None
    sent, counted = share
    if counted - sent < 2 or counted <= sent * (1 + MIXED_TRAFFIC_SHARE):
        return None
    return (
        f"The server counted {counted:,} TTFTs over this run while it sent {sent:,} "
        f"({sent / counted:.0%} of them): other clients' traffic is mixed into the server's "
        "figures."
    )


def run_warnings(summary: Summary) -> list[str]:
    """What shaped the run besides the server, as every view shows it up front: the
    client (``client_warning``), other clients' traffic (``mixed_traffic_warning``), the
    machine holding a modelled engine's steps back (``probes.engine_pace.late_warning``:
    only when the engine ran late beyond its bound)."""
    found = (client_warning(summary), mixed_traffic_warning(summary), late_warning(summary))
    return [w for w in found if w]


def error_message_rows(summary: Summary) -> list[tuple[str, str, str]]:
    """(message, class, count) of the most frequent error messages (``summary.json``)."""
    return [
        (" ".join(m.message.split()), str(m.kind), fmt_count(m.count))
        for m in summary.error_messages
    ]


def error_counts(summary: Summary) -> list[tuple[str, str]]:
    errors = summary.errors
    return [(str(kind), fmt_count(n)) for kind, n in errors.items() if known_number(n)]


#: The server section's figures: (its reading in ``ServerSection``, label, formatter).
SERVER_FIGURES: tuple[tuple[Callable[[ServerSection], Reading | Level | None], str, Any], ...] = (
    (lambda s: s.prefix.observed_hit_rate, "prefix hit rate (server counters)", fmt_share),
    (lambda s: s.prefix.expected_hit_rate, "prefix hit rate (oracle, all sent)", fmt_share),
    (lambda s: s.preemptions, "preemptions", fmt_count),
    (lambda s: s.running, "running requests", fmt_count),
    (lambda s: s.waiting, "waiting requests", fmt_count),
    (lambda s: s.kv_usage, "KV usage (active share)", fmt_share),
    (lambda s: s.block_size, "block size", fmt_count),
    (lambda s: s.num_blocks, "KV blocks", fmt_count),
)


def server_section(summary: Summary) -> list[list[str]]:
    """Rows of ``[figure, value, provenance, source]`` from the summary's ``server`` section.

    A level (gauge over the run) shows its mean and max; a counter or ratio its value.
    Each keeps the provenance the probe gave it, so a derived or unknown figure is never
    shown as a reading.
    """
    server = summary.server
    if server is None:
        return []
    if server.available is False:
        return [["server metrics", UNKNOWN, UNKNOWN, str(server.reason or "")]]
    rows = [["flavour", str(server.flavour or UNKNOWN), "", ""]]
    share = server_share(summary)
    if share is not None:
        sent, counted = share
        rows.append(
            [
                "this run's share of the server's requests",
                f"{fmt_share(min(sent / counted, 1.0))} ({sent:,} of {counted:,} TTFTs)",
                "derived",
                "client first tokens / server TTFT histogram count",
            ]
        )
    for reading, label, fmt in SERVER_FIGURES:
        entry = reading(server)
        if entry is None:
            continue
        if not entry.level:
            shown = fmt(entry.value)
        elif entry.max is None:
            shown = UNKNOWN
        else:
            shown = f"mean {fmt(entry.mean)}, max {fmt(entry.max)}"
        rows.append([label, shown, str(entry.provenance or UNKNOWN), str(entry.source or "")])
    return rows + hit_tier_rows(server)


def hit_tier_rows(server: ServerSection) -> list[list[str]]:
    """The server's prefix hits by tier (``hits_by_source``), only where it splits them."""
    tiers = server.hits_by_source.tiers if server.hits_by_source is not None else {}
    return [
        [
            f"prefix hits: {tier} tier",
            f"{fmt_count(e.tokens.value)} tokens ({fmt_share(e.share.value)})",
            str(e.tokens.provenance or UNKNOWN),
            str(e.tokens.source or ""),
        ]
        for tier, e in tiers.items()
    ]


def itl_stats_by_kind(data: ReportData) -> list[dict[str, Any]]:
    """Per request kind: token gaps, p50, p99, max — what the summary's one ITL hides."""
    gaps = data.gaps
    if gaps.gap_s.size == 0:
        return []
    kinds = group_kinds(data.gap_kinds)
    stats = []
    for name in dict.fromkeys(kinds.tolist()):
        values = gaps.gap_s[kinds == name]
        p50, p99 = quantiles(values, (0.5, 0.99))
        stats.append(
            {
                "kind": str(name),
                "gaps": int(values.size),
                "p50_s": float(p50),
                "p99_s": float(p99),
                "max_s": float(values.max()),
            }
        )
    return sorted(stats, key=lambda row: -row["gaps"])


def itl_by_kind(data: ReportData) -> list[list[str]]:
    """``itl_stats_by_kind`` as display rows."""
    return [
        [row["kind"], fmt_count(row["gaps"])]
        + [fmt_duration(row[key]) for key in ("p50_s", "p99_s", "max_s")]
        for row in itl_stats_by_kind(data)
    ]


def pool_rows(data: ReportData) -> list[list[str]]:
    """Per pool bucket: provenance, min, max, last."""
    if data.pool is None:
        return []
    rows = []
    for layer in data.pool.layers:
        values = layer.values[np.isfinite(layer.values)]
        stats = (values.min(), values.max(), values[-1]) if values.size else (None,) * 3
        rows.append([layer.name, layer.provenance, *(fmt_count(v) for v in stats)])
    return rows


def pool_sources(data: ReportData) -> list[str]:
    """Where each bucket came from, or why it is unknown."""
    if data.pool is None:
        return []
    return [f"{layer.name}: {layer.source or UNKNOWN}" for layer in data.pool.layers]


def error_examples(data: ReportData, limit: int = 8) -> list[tuple[str, str]]:
    """A few distinct error messages as the server sent them (escaped by the renderer)."""
    df = data.requests
    if "error_message" not in df or df.empty:
        return []
    failed = df[df["error_message"].notna()]
    kinds = failed["error_kind"] if "error_kind" in failed else failed["status"]
    seen = failed.assign(k=kinds.fillna("error").astype(str)).drop_duplicates("error_message")
    return [(row.k, str(row.error_message)[:400]) for row in seen.head(limit).itertuples()]


def diagnose_hint(data: ReportData) -> str:
    return f"prefillscope diagnose {data.path}"


def report_dict(data: ReportData, html_path: str | None) -> dict[str, Any]:
    """What ``prefillscope report --json`` prints: the report's content as numbers."""
    hdr = header(data)
    pool = None
    if data.pool is not None:
        pool = {
            "unit": data.pool.unit,
            "flavour": data.pool.flavour,
            "samples": int(data.pool.t_s.size),
            "buckets": {
                layer.name: {
                    "provenance": layer.provenance,
                    "source": layer.source,
                    "max": known_number(float(np.nanmax(layer.values))),
                }
                for layer in data.pool.layers
            },
        }
    return {
        "run_dir": str(data.path),
        "status": data.status,
        "header": dict(hdr.fields),
        "summary": data.summary.as_read() if data.summary is not None else None,
        "itl_by_kind": itl_stats_by_kind(data),
        "long_prompt_arrivals": int(data.requests["long_prompt"].sum())
        if len(data.requests)
        else 0,
        "pool": pool,
        "diagnosis": data.diagnosis.to_json() if data.diagnosis is not None else None,
        "notes": data.notes,
        "html": html_path,
    }
