"""The vocabulary of every metric prefillscope reports, declared once: its key, its names,
its unit, which way is better, the table it is computed from and how (in words).

``summary.json`` holds a ``describe()`` distribution under each latency's ``key``;
``compare``, its gates and the A/B name a latency ``<prefix>_<statistic>`` (``itl_p99``)
and a throughput by its key; the report and the summary view label them with ``label``
(``short`` on a narrow terminal), the live dashboard and the A/B with ``short`` and a
statistic (``named``: ``ITL p99``), and every view writes a value in the metric's unit
with ``format``.

A latency is declared here (``declare_latency``): its names, unit and direction, and the
statistics ``sweep`` shows of it (``headline``). How it is computed over the request
table (the columns it reads and its formula) is ``probes.metric_formulas``'s, registered
against this identity by ``probes.metric_formulas.latency`` — the one call a module of
its own makes to add a latency, which then reaches ``summary.json``, ``simulate``,
``compare`` and its gates, the report and ``sweep`` with no other edit. ITL has no
formula: it is the per-token gaps of the chunks table (``probes.token_gaps``).

It is in ``runfmt``, below every package that reads or writes a run, so that the run
format's own documents name their keys from here as every package above does; it
imports nothing outside ``runfmt``.

The selections are here too, each named by its use (``COMPARE_DEFAULTS``,
``AB_ITL_QUANTILES`` …), and so is the name a statistic is written under in a JSON
document (``json_name``: ``ttft_p50_s``, ``ttft_p50[decode]_s``, ``output_tokens_per_s``).
Nothing here needs numpy: the CLI's ``--help`` reads these names.
"""

from __future__ import annotations

from dataclasses import dataclass

from runfmt.names import CHUNKS_TABLE, REQUESTS_TABLE
from runfmt.units import fmt_rate, fmt_seconds

#: How a statistic is written after a metric's name (``ITL p99.9``); ``max`` is the
#: A/B's worst gap of a trial.
STAT_LABELS = {
    "mean": "mean",
    "p50": "p50",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "p999": "p99.9",
    "max": "max",
}


@dataclass(frozen=True)
class Metric:
    """One reported metric: its identity (how ``probes.metric_formulas`` computes a
    latency per request is registered against it there)."""

    #: The ``summary.json`` key (and, for latencies, the per-request column).
    key: str
    #: The name ``compare --metric``/``--gate`` use: ``<prefix>_<statistic>`` for a latency.
    prefix: str
    label: str
    short: str
    unit: str
    higher_is_better: bool
    #: The run table it is computed from (``runfmt.names``).
    table: str
    #: How it is computed, in words (the conventions are ``probes/latency.py``'s).
    computed: str
    #: Shown in the report's latency table.
    reported: bool = True
    #: The statistics ``sweep`` shows of it at each load (``sweep_figures``).
    headline: tuple[str, ...] = ()

    def named(self, stat: str, *, stat_first: bool = False) -> str:
        """A statistic of this metric as a reader names it: ``ITL p99`` (``p99 ITL`` with
        ``stat_first``, as the A/B verdict's sentences read)."""
        parts = (STAT_LABELS.get(stat, stat), self.short)
        return " ".join(parts if stat_first else reversed(parts))

    def format(self, value: float | None, missing: str = "\u2013") -> str:
        """A value in this metric's unit (``12.3 ms``, ``1,234 tok/s``); ``missing`` when
        it is unknown (absent or NaN)."""
        if value is None or value != value:
            return missing
        return fmt_seconds(value) if self.unit == "s" else fmt_rate(value, self.unit)


_LATENCIES: list[Metric] = []


def declare_latency(metric: Metric) -> Metric:
    """Declare ``metric`` a latency distribution of every run (after those declared before
    it); ``ValueError`` when its key or prefix is taken. A latency computed per request
    is declared with its formula by ``probes.metric_formulas.latency``."""
    taken = {m.key for m in _every()} | {m.prefix for m in _every()}
    if metric.key in taken or metric.prefix in taken:
        raise ValueError(f"a metric named {metric.key!r} or {metric.prefix!r} is registered")
    _LATENCIES.append(metric)
    return metric


def undeclare(key: str) -> None:
    """Forget the latency declared under ``key`` (a test's toy)."""
    _LATENCIES[:] = [m for m in _LATENCIES if m.key != key]


def latencies() -> tuple[Metric, ...]:
    """The latency distributions, in the order the summary and the report list them."""
    return tuple(_LATENCIES)


#: The throughputs: completed work over the measured window (higher is better).
THROUGHPUTS: tuple[Metric, ...] = (
    Metric("requests_per_s", "requests_per_s", "requests per second", "req/s", "req/s", True,
           REQUESTS_TABLE, "completed requests / measured window"),
    Metric("output_tokens_per_s", "output_tokens_per_s", "output tokens per second", "tok/s",
           "tok/s", True, REQUESTS_TABLE, "output tokens of completed requests / window"),
)  # fmt: skip

#: The client's dispatch lag (a client-health figure, ``summary.client``; not compared).
DISPATCH_LAG = Metric("dispatch_lag_s", "dispatch_lag", "dispatch lag (actual − intended send)",
                      "dispatch lag", "s", False, REQUESTS_TABLE,
                      "actual send time − intended send time", reported=False)  # fmt: skip

#: The stall metrics: per long prefill (``probes.stall_events``: its one definition of an
#: event), a mean over events. ``compare`` and its gates name each by its ``prefix``
#: (``stall_worst:+25%``); ``summary.json``'s ``stalls`` writes ``<prefix>_mean_s`` and so on.
STALLS: tuple[Metric, ...] = (
    Metric("stall_worst_s", "stall_worst", "worst decode gap per prefill", "worst stall", "s",
           False, CHUNKS_TABLE, "per long prompt: the longest decode gap overlapping its "
           "prefill (send → first token); mean over long prompts", reported=False),
    Metric("stall_lost_s", "stall_lost", "decode time lost per prefill", "stall time lost", "s",
           False, CHUNKS_TABLE, "per long prompt: the decode gaps overlapping its prefill, "
           "each gap's excess over the median decode gap, summed; mean over long prompts",
           reported=False),
)  # fmt: skip

STALL_WORST, STALL_LOST = STALLS
#: The stall metrics by the name ``compare`` gives them (their prefix).
STALL_NAMES = {metric.prefix: metric for metric in STALLS}
REQUESTS_PER_S, OUTPUT_TOKENS_PER_S = THROUGHPUTS


def _every() -> tuple[Metric, ...]:
    """Every metric registered, latencies first."""
    return (*_LATENCIES, *THROUGHPUTS, DISPATCH_LAG, *STALLS)


#: The latencies every run reports, in the order the summary and the report list them
#: (their formulas: ``probes.metric_formulas``).
TTFT = declare_latency(
    Metric(
        "ttft_s",
        "ttft",
        "TTFT (from intended send)",
        "TTFT",
        "s",
        False,
        REQUESTS_TABLE,
        "first token − intended send time (queueing in the client counts)",
        headline=("p50", "p99"),
    )
)
TTFT_SENT = declare_latency(
    Metric(
        "ttft_sent_s",
        "ttft_sent",
        "TTFT (from actual send)",
        "TTFT (sent)",
        "s",
        False,
        REQUESTS_TABLE,
        "first token − actual send time",
    )
)
ITL = declare_latency(
    Metric(
        "itl_s",
        "itl",
        "ITL (per token)",
        "ITL",
        "s",
        False,
        CHUNKS_TABLE,
        "per-token gaps: a chunk of n tokens after a gap g gives n gaps of g/n",
        headline=("p50", "p99"),
    )
)
TPOT = declare_latency(
    Metric(
        "tpot_s",
        "tpot",
        "TPOT",
        "TPOT",
        "s",
        False,
        REQUESTS_TABLE,
        "(E2E − TTFT) / (output tokens − 1), requests with two tokens or more",
    )
)
E2E = declare_latency(
    Metric(
        "e2e_s",
        "e2e",
        "E2E (from intended send)",
        "E2E",
        "s",
        False,
        REQUESTS_TABLE,
        "end of the stream − intended send time",
    )
)
E2E_SENT = declare_latency(Metric(
    "e2e_sent_s", "e2e_sent", "E2E (from actual send)", "E2E (sent)", "s", False,
    REQUESTS_TABLE, "end of the stream − actual send time", reported=False,
))  # fmt: skip


def by_key(key: str) -> Metric:
    """The metric whose ``summary.json`` key is ``key`` (``KeyError`` for an unknown one)."""
    for metric in _every():
        if metric.key == key:
            return metric
    raise KeyError(key)


def stat_name(metric: Metric, stat: str) -> str:
    """How ``compare``, its gates and the A/B name a statistic of a metric:
    ``<prefix>_<statistic>`` (``itl_p99``) for a latency, a throughput by its key."""
    if metric.higher_is_better:
        return metric.key
    if stat not in STAT_LABELS:
        raise ValueError(f"unknown statistic {stat!r} of {metric.key}")
    return f"{metric.prefix}_{stat}"


def stat_of(name: str) -> tuple[Metric, str]:
    """The metric and statistic a ``stat_name`` names (``itl_p99`` → ITL, ``p99``);
    ``KeyError`` for a name no latency statistic has."""
    candidates = (m for m in _every() if m not in STALLS)
    for metric in sorted(candidates, key=lambda m: -len(m.prefix)):
        prefix, sep, stat = name.rpartition("_")
        if sep and prefix == metric.prefix and stat in STAT_LABELS and not metric.higher_is_better:
            return metric, stat
    raise KeyError(f"no latency statistic is named {name!r}")


def _stats(metric: Metric, *stats: str) -> tuple[str, ...]:
    return tuple(stat_name(metric, stat) for stat in stats)


def kind_name(name: str, kind: str | None) -> str:
    """``ttft_p50`` of request kind ``decode`` → ``ttft_p50[decode]``; no kind: ``name``."""
    return name if kind is None else f"{name}[{kind}]"


def split_kind(name: str) -> tuple[str, str | None]:
    """``ttft_p50[decode]`` → ``("ttft_p50", "decode")``; ``itl_p99`` → ``("itl_p99", None)``."""
    base, sep, rest = name.partition("[")
    return (base, rest[:-1]) if sep and rest.endswith("]") else (name, None)


_THROUGHPUT_NAMES = frozenset(metric.key for metric in THROUGHPUTS)


def json_name(name: str, kind: str | None = None, part: str | None = None) -> str:
    """The name a statistic (``stat_name``, or another figure in seconds such as the A/B's
    ``event_stall``) is written under in a JSON document: of one request kind in brackets,
    a ``part`` of it after an underscore, and ``_s`` for seconds — except a throughput,
    whose key names its unit: ``ttft_p50_s``, ``ttft_p50[decode]_s``,
    ``itl_max_per_trial_s``, ``output_tokens_per_s``."""
    if name in _THROUGHPUT_NAMES and kind is None and part is None:
        return name
    full = kind_name(name, kind) + (f"_{part}" if part else "")
    return f"{full}_s"


#: What ``compare`` shows when no metric is named.
COMPARE_DEFAULTS = (
    *_stats(TTFT, "p50", "p99"),
    *_stats(ITL, "p50", "p99"),
    *_stats(TPOT, "p50"),
    *_stats(E2E, "p50", "p99"),
    REQUESTS_PER_S.key,
    OUTPUT_TOKENS_PER_S.key,
)
#: The headline latencies ``prefillscope runs`` lists: (its JSON key, the summary key,
#: the statistic) — ``("ttft_p50_s", "ttft_s", "p50")``.
RUNS_HEADLINE = tuple(
    (json_name(stat_name(metric, stat)), metric.key, stat)
    for metric, stat in ((TTFT, "p50"), (TTFT, "p99"), (ITL, "p99"))
)
#: What ``compare`` shows besides ``COMPARE_DEFAULTS`` when a run has stall events.
COMPARE_STALLS = tuple(STALL_NAMES)
#: The A/B's per-event metrics (``ab.json`` names) and the stall metric each one is.
AB_EVENTS = {"event_stall": STALL_WORST, "event_lost": STALL_LOST}
#: The A/B's ITL quantiles, reported per arm with an interval.
AB_ITL_QUANTILES = _stats(ITL, "p50", "p95", "p99")
#: The A/B's TTFT quantiles, of all requests and per request kind.
AB_TTFT_QUANTILES = _stats(TTFT, "p50", "p95", "p99")
#: What an A/B compares every arm on (ratios arm / reference), over all requests.
AB_COMPARED = (*AB_ITL_QUANTILES, *AB_TTFT_QUANTILES, OUTPUT_TOKENS_PER_S.key)
#: The figures of each A/B arm, its trials pooled (and ``AB_ITL_MAX``).
AB_ARM_FIGURES = (*AB_COMPARED, REQUESTS_PER_S.key)
#: The worst inter-token gap of an A/B trial (ITL's ``max``).
AB_ITL_MAX = stat_name(ITL, "max")
#: The A/B's arms table: each arm's figures, by name.
AB_ARM_METRICS = (
    *AB_ITL_QUANTILES,
    AB_ITL_MAX,
    *_stats(TTFT, "p50", "p99"),
    OUTPUT_TOKENS_PER_S.key,
)
#: The A/B's stall judged on pooled gaps, and the metrics its SLOs bound
#: (``--slo itl=…``, ``ttft=…``).
AB_STALL_GAPS = AB_SLO_ITL = stat_name(ITL, "p99")
AB_SLO_TTFT = stat_name(TTFT, "p99")
#: The TTFT an A/B verdict weighs (of the prefill-heavy kind when the traffic mixes kinds).
AB_TTFT_WEIGHED = stat_name(TTFT, "p50")
#: The A/B's trade-off by chunk size: the stall, the worst gap, the TTFT weighed (also per
#: kind), the TTFT SLO's metric.
AB_TRADEOFF = (AB_STALL_GAPS, AB_ITL_MAX, AB_TTFT_WEIGHED, AB_SLO_TTFT)
#: The figures the simulator's held-out check is judged on (their relative error against
#: its goal), and what ``simulate --holdout`` prints: those, then the means.
SIM_HOLDOUT = (*_stats(TTFT, "p50"), *_stats(ITL, "p50", "p99"))
SIM_HOLDOUT_SHOWN = (*SIM_HOLDOUT, *_stats(TTFT, "mean"), *_stats(ITL, "mean"))
#: The latency figures ``simulate --calibrate`` prints, measured against replayed.
SIM_CALIBRATION_SHOWN = (*_stats(TTFT, "mean"), *SIM_HOLDOUT, *_stats(ITL, "mean"))


def sweep_figures() -> tuple[str, ...]:
    """The latencies of each load of a sweep (``sweep.json``'s rows, its table and curves):
    each registered latency's ``headline`` statistics."""
    return tuple(stat_name(m, stat) for m in latencies() for stat in m.headline)


#: What the simulator predicts for each arm of an A/B (``ab.json``'s ``prediction``).
AB_PREDICTED = (*_stats(TTFT, "p50", "p99"), *_stats(ITL, "p50", "p99"), AB_ITL_MAX)
#: The client's dispatch lag at p99, a ``summary.json`` client-health figure.
CLIENT_DISPATCH_LAG = stat_name(DISPATCH_LAG, "p99")
