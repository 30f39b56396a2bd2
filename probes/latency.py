"""Latency statistics of one run: per-request metrics, per-token gaps and ``summary.json``.

Conventions, stated once here because every report inherits them:

* **Which requests count.** Warm-up requests are excluded from everything. Latencies,
  per-token gaps, token throughput and prefix hit rates are over *completed* requests
  (status ``ok``); failed requests are counted by error class and lower goodput.
* **TTFT and E2E** are measured from the *intended* send time (``ttft_s``, ``e2e_s``), so a
  client that falls behind its schedule cannot hide queueing (coordinated omission), and
  from the actual send time (``ttft_sent_s``, ``e2e_sent_s``). The difference is the
  dispatch lag, ``sent_s - intended_s``. Part of it may be a wait for a
  ``--max-concurrency`` slot (``concurrency_wait_s = released_s - intended_s``, 0 for runs
  that predate ``released_s``): the cap's queue, which a slow server fills, rather than
  the client's speed. Under a cap, TTFT and E2E from the actual send are what ``vllm
  bench serve`` reports (it times from its own send, after the slot), so the screen
  leads with them there (``prefillscope.report.content``).
* **ITL is per token** (``probes.token_gaps`` states and applies the rule).
* **TPOT** = (E2E − TTFT)/(output_tokens − 1) = (end − first token)/(output_tokens − 1),
  defined for requests with at least two output tokens.
* **Throughput** is over the measured window: from the first send of a measured request
  (intended or actual, whichever is earlier) to the last end of one. Requests and output
  tokens of completed requests are counted.
* **Goodput**: a request is good when it completed and meets every SLO given. The ITL SLO
  applies to the request's *worst* per-token gap: a p99 of one request's gaps would excuse
  exactly the stalls a reader sees in a long answer, and for outputs under 100 tokens it
  is the maximum anyway. Share = good / measured requests (a failure is not good service);
  rate = good / window.
* **Stalls** (``summary.json`` ``stalls``, runs of more than one request kind): each long
  prompt's prefill is one stall event, with its worst decode gap and the decode time it
  cost (``probes.stall_events`` defines the event), beside the pooled ITL quantiles.
* **Client health.** A run is client-limited when its dispatch lag p99, less any wait
  for a ``--max-concurrency`` slot (a cap is the user's choice), exceeds
  ``DISPATCH_LAG_LIMIT_S`` or the client's CPU share stays at or above
  ``CPU_SATURATION_SHARE`` of one core, averaged over any ``CPU_SUSTAIN_S`` span of the
  measured window (over the whole window when it is shorter); with worker processes,
  the busiest worker's share (each has a core of its own).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from probes.client_limits import CPU_SATURATION_SHARE, CPU_SUSTAIN_S, DISPATCH_LAG_LIMIT_S
from probes.metric_formulas import formula, per_request
from probes.percentiles import (
    PICKED,
    Picked,
    levels_of,
    picked_section,
    picked_values,
    picks_itl,
)
from probes.request_counts import TOP_ERROR_MESSAGES, RequestCounts, completed_mask
from probes.stall_events import (
    NO_KIND,
    RunStalls,
    StallEvents,
    gaps_of_requests,
    longest_first,
    prefill_kind,
    stall_summary,
)
from probes.token_gaps import TokenGaps, chunk_gaps, token_chunk_parts
from probes.usage_counts import SuspectCounts, suspect_mask
from runfmt.codec import frozen_map
from runfmt.columns import Columns, IdSet, Table, numbers, texts
from runfmt.metrics import DISPATCH_LAG, E2E, ITL, OUTPUT_TOKENS_PER_S, REQUESTS_PER_S, TPOT, TTFT
from runfmt.metrics import latencies as registered_latencies
from runfmt.names import CHUNKS_TABLE, CLIENT_TABLE, REQUESTS_TABLE, WORKER_COLUMN
from runfmt.run import Run
from runfmt.rundir import RunDir
from runfmt.slo import Slo
from runfmt.summary import Summary
from runfmt.summary_sections import (
    ChunksSection,
    ClientSection,
    CpuShare,
    Distribution,
    GoodputSection,
    PrefixSection,
    RequestsSection,
    Stats,
    ThroughputSection,
    WorkerShare,
)
from runfmt.tables import measured_rows as measured
from runtime.quantiles import Selection, describe, finite, select_passes

if TYPE_CHECKING:
    import pandas as pd

#: A table read a part at a time (``RunTables.parts``): each call gives the same parts in
#: the same order. A table held whole is one part (``parts_of``).
Parts = Callable[[], Iterable[Table]]


#: The requests' columns the summary reads besides its latencies' inputs (a request's
#: text and token ids are most of a row and none of its statistics).
_SUMMARY_COLUMNS = (
    "id", "kind", "warmup", "status", "intended_s", "released_s", "sent_s", "first_token_s",
    "end_s", "prompt_tokens", "output_tokens", "cached_tokens", "expected_cached_tokens",
    "expected_offload_tokens", "usage_suspect", "error_kind", "error_message",
)  # fmt: skip


def summary_columns() -> tuple[str, ...]:
    """The requests' columns ``summarize`` reads: its own, and each registered latency's
    inputs (``probes.metric_formulas``)."""
    inputs = (name for _, f in per_request() for name in f.inputs)
    return tuple(dict.fromkeys((*_SUMMARY_COLUMNS, *inputs)))


def parts_of(table: Table | Parts) -> Parts:
    """``table`` as ``Parts``: itself when it is already, else one part, the whole table."""
    return table if callable(table) else (lambda: (table,))


def latency_columns(requests: Table, ids: Any = None) -> Columns:
    """Per-request timings in seconds, one row per request, in the requests' order.

    Columns: ``id`` (``ids`` when given, else the requests' ``id``, else their position),
    each registered latency computed per request by its own formula
    (``probes.metric_formulas``: ``ttft_s``, ``ttft_sent_s``, ``tpot_s``, ``e2e_s``,
    ``e2e_sent_s`` …), ``dispatch_lag_s``, ``concurrency_wait_s``, ``output_tokens`` and
    ``ok``. A value that cannot be computed (no first token, one output token) is NaN.
    """
    computed = per_request()
    names = {"intended_s", "released_s", "output_tokens"}
    names |= {name for _, f in computed for name in f.inputs}
    raw = {name: numbers(requests, name) for name in sorted(names)}
    intended, released = raw["intended_s"], raw["released_s"]
    released = np.where(np.isnan(released), intended, released)  # no cap, or an older run
    if ids is None:
        ids = np.asarray(requests["id"]) if "id" in requests else np.arange(len(requests))
    return Columns(
        {
            "id": np.asarray(ids),
            **{metric.key: f.values(raw) for metric, f in computed},
            "concurrency_wait_s": released - intended,
            "output_tokens": raw["output_tokens"],
            "ok": completed_mask(requests),
        },
        len(requests),
    )


def request_latencies(requests: pd.DataFrame) -> pd.DataFrame:
    """``latency_columns`` as a DataFrame on the requests' index (the id the index when
    the requests have no ``id``), for the readers that go on in pandas."""
    ids = None if "id" in requests else requests.index
    return latency_columns(requests, ids).to_frame(index=requests.index)


@dataclass(frozen=True)
class Window:
    """The measured window: first send (intended or actual) to last end."""

    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s

    @property
    def valid(self) -> bool:
        return bool(np.isfinite(self.seconds) and self.seconds > 0)

    @classmethod
    def between(cls, start: float, end: float) -> Window:
        """From ``start`` to ``end``; unknown (NaN) when either is not finite."""
        if not (math.isfinite(start) and math.isfinite(end)):
            return cls(float("nan"), float("nan"))
        return cls(start, end)


def measured_window(requests: Table) -> Window:
    """The window throughput is measured over (see the module docstring)."""
    return Window.between(*window_bounds(requests))


def window_bounds(requests: Table) -> tuple[float, float]:
    """The earliest first send and the latest end of ``requests`` (inf and -inf when
    none): ``measured_window``'s, kept over the parts of a table read a part at a time."""
    starts = finite(np.fmin(numbers(requests, "intended_s"), numbers(requests, "sent_s")))
    ends = finite(numbers(requests, "end_s"))
    start = float(starts.min()) if starts.size else math.inf
    return start, float(ends.max()) if ends.size else -math.inf


def possible_tokens(requests: Table, ok: np.ndarray) -> tuple[np.ndarray, int]:
    """The output tokens of the rows ``ok`` selects, an impossible (negative) count — a
    server's usage that cannot be right — as 0; and how many were left out so."""
    counts = numbers(requests, "output_tokens")[ok]
    impossible = counts < 0
    return np.where(impossible, 0.0, np.nan_to_num(counts)), int(impossible.sum())


def throughput(requests: Table, window: Window) -> ThroughputSection:
    """Completed requests and their output tokens per second over the measured window
    (a negative token count, which a server's usage can claim, is left out and counted
    in ``output_tokens_excluded``)."""
    ok = completed_mask(requests)
    counts, excluded = possible_tokens(requests, ok)
    return throughput_of(int(ok.sum()), float(counts.sum()), excluded, window)


def throughput_of(
    completed: int, tokens: float, excluded: int, window: Window
) -> ThroughputSection:
    """``throughput`` from its counts: completed requests, their possible output tokens
    (a sum of whole numbers: the same however it is split) and those left out."""
    rate = (1.0 / window.seconds) if window.valid else None
    return ThroughputSection(
        requests_per_s=completed * rate if rate is not None else None,
        output_tokens_per_s=tokens * rate if rate is not None else None,
        output_tokens=int(tokens),
        window_s=window.seconds if window.valid else None,
        start_s=window.start_s if window.valid else None,
        end_s=window.end_s if window.valid else None,
        output_tokens_excluded=excluded or None,
    )


def throughput_bins(requests: Table, window: Window, bins: int) -> pd.DataFrame:
    """Throughput in ``bins`` equal slices of the window, by completion time.

    The mean over bins equals the run's throughput; their spread is what a comparison
    of two runs' throughput resamples (one run has one throughput, but many slices).
    """
    import pandas as pd

    if not window.valid or bins < 1:
        return pd.DataFrame({REQUESTS_PER_S.key: [], OUTPUT_TOKENS_PER_S.key: []})
    ok = completed_mask(requests)
    end = numbers(requests, "end_s")[ok]
    tokens, _ = possible_tokens(requests, ok)
    edges = np.linspace(window.start_s, window.end_s, bins + 1)
    slot = np.clip(np.searchsorted(edges, end, side="right") - 1, 0, bins - 1)
    width = window.seconds / bins
    return pd.DataFrame(
        {
            REQUESTS_PER_S.key: np.bincount(slot, minlength=bins) / width,
            OUTPUT_TOKENS_PER_S.key: np.bincount(slot, weights=tokens, minlength=bins) / width,
        }
    )


def meets_slo(latencies: Table, itl_max_s: dict[Any, float], slo: Slo) -> np.ndarray:
    """True for each completed request meeting every SLO given.

    ``latencies`` is ``latency_columns()``; ``itl_max_s`` the worst per-token gap by
    request id. A metric a request does not have (no gaps or TPOT for a one-token answer)
    cannot be missed.
    """
    good = np.asarray(latencies["ok"], dtype=bool).copy()
    bounds = {TTFT.key: slo.ttft_s, E2E.key: slo.e2e_s, TPOT.key: slo.tpot_s}
    for column, bound in bounds.items():
        if bound is not None:
            good &= ~(np.asarray(latencies[column], dtype=float) > bound)
    if slo.itl_s is not None:
        ids = np.asarray(latencies["id"], dtype=object).tolist()
        worst = np.array([itl_max_s.get(i, np.nan) for i in ids], dtype=float)
        good &= ~(worst > slo.itl_s)
    return good


def goodput(good: np.ndarray, window: Window, slo: Slo) -> GoodputSection:
    """Share and rate of measured requests that met every SLO."""
    return goodput_of(int(good.sum()), good.size, window, slo)


def goodput_of(count: int, measured: int, window: Window, slo: Slo) -> GoodputSection:
    """``goodput`` from the count of good requests among ``measured``."""
    return GoodputSection(
        slo=slo,
        requests=count,
        share=count / measured if measured else None,
        requests_per_s=count / window.seconds if window.valid else None,
    )


def _sustained_max(t: np.ndarray, share: np.ndarray, span_s: float) -> float:
    """Highest mean CPU share over any full ``span_s`` window (whole run if shorter)."""
    if t[-1] - t[0] < span_s:
        return float(share.mean())
    cumulative = np.concatenate([[0.0], np.cumsum(share)])
    ends = np.flatnonzero(t - t[0] >= span_s)
    starts = np.searchsorted(t, t[ends] - span_s, side="right")
    return float(((cumulative[ends + 1] - cumulative[starts]) / (ends + 1 - starts)).max())


def cpu_shares(t: np.ndarray, share: np.ndarray, owner: np.ndarray | None) -> CpuShare | None:
    """The client's CPU share of a core, from its samples in time order (times ``t``,
    shares, and with worker processes the worker of each, ``owner``, -1 unknown): mean,
    max and the highest mean over any ``CPU_SUSTAIN_S`` span. A run of worker processes
    has each worker's in ``workers``: each loop has a core of its own, so the busiest
    worker's figures are the client's (a mean over workers would hide a saturated one),
    and ``cores_mean`` is the cores they used together."""
    ok = np.isfinite(share)
    if not ok.any():
        return None
    sharded = owner is not None
    owner = owner[ok] if owner is not None else np.zeros(ok.sum())
    share, t = share[ok], t[ok]
    workers = []
    for k in np.unique(owner):
        mine = owner == k
        workers.append(
            WorkerShare(
                worker=int(k),
                mean=float(share[mine].mean()),
                max=float(share[mine].max()),
                sustained_max=_sustained_max(t[mine], share[mine], CPU_SUSTAIN_S),
            )
        )
    busiest = max(workers, key=lambda w: w.sustained_max or 0.0)
    cpu = CpuShare(busiest.mean, float(share.max()), busiest.sustained_max)
    if sharded:
        cores = sum(w.mean or 0.0 for w in workers)
        return replace(cpu, busiest_worker=busiest.worker, cores_mean=cores, workers=tuple(workers))
    return cpu


def client_health(
    dispatch_lag_s: np.ndarray,
    client: Table,
    window: Window,
    concurrency_wait_s: np.ndarray | None = None,
) -> ClientSection:
    """Dispatch lag, event-loop lag and CPU share of the client, and whether they limited it.

    ``concurrency_wait_s``: each request's wait for a ``--max-concurrency`` slot, part of
    its dispatch lag, reported when any request waited. A cap is the user's choice, so
    its queue does not make the client limited: the bound is checked on the lag past
    the slot (``sent − released``), the client's own."""
    waits = finite(concurrency_wait_s) if concurrency_wait_s is not None else np.empty(0)
    own = dispatch_lag_s
    if concurrency_wait_s is not None:
        own = dispatch_lag_s - np.nan_to_num(concurrency_wait_s, nan=0.0)
    longest = float(waits.max()) if waits.size else None
    return health_of(
        Distribution(**describe(dispatch_lag_s)),
        describe(own)["p99"],
        Distribution(**describe(waits)),
        longest,
        client,
        window,
    )


def health_of(
    lag: Distribution,
    own_p99: float | None,
    waited: Distribution,
    longest_wait: float | None,
    client: Table,
    window: Window,
) -> ClientSection:
    """``client_health`` from the statistics of the lags: ``describe()`` of the dispatch
    lag and of the slot waits, the p99 of the lag past the slot, and the longest wait."""
    reasons: list[str] = []
    if own_p99 is not None and own_p99 > DISPATCH_LAG_LIMIT_S:
        label = DISPATCH_LAG.named("p99")
        reason = f"{label} {own_p99 * 1e3:.1f} ms > {DISPATCH_LAG_LIMIT_S * 1e3:.0f} ms"
        if waited.p99 is not None and waited.p99 > 0:
            reason += " past the --max-concurrency slot wait"
        reasons.append(reason)
    loop_lag: Stats | None = None
    cpu: CpuShare | None = None
    if not client.empty:
        t = numbers(client, "t_s")
        inside = np.isfinite(t)
        if window.valid:
            inside &= (t >= window.start_s) & (t <= window.end_s)
        order = np.flatnonzero(inside)[np.argsort(t[inside], kind="stable")]
        loop = finite(numbers(client, "loop_lag_s")[order])
        if loop.size:
            loop_lag = Stats(**describe(loop), max=float(loop.max()))
        owner = None
        if WORKER_COLUMN in client:
            owner = numbers(client, WORKER_COLUMN)[order]
            owner = np.where(np.isnan(owner), -1.0, owner)
        cpu = cpu_shares(t[order], numbers(client, "cpu_share")[order], owner)
        if cpu is not None and (cpu.sustained_max or 0.0) >= CPU_SATURATION_SHARE:
            which = f" (worker {cpu.busiest_worker})" if cpu.workers is not None else ""
            reasons.append(
                f"client CPU at {cpu.sustained_max:.0%} of a core{which} over "
                f"{CPU_SUSTAIN_S:g} s (saturated at {CPU_SATURATION_SHARE:.0%})"
            )
    waits = longest_wait is not None and longest_wait > 0  # a --max-concurrency cap held some
    return ClientSection(
        dispatch_lag=lag,
        dispatch_lag_p99_s=lag.p99,
        loop_lag=loop_lag,
        cpu_share=cpu,
        limited=bool(reasons),
        reasons=tuple(reasons),
        concurrency_wait=waited if waits else None,
    )


#: The cached-token columns whose share of the prompt tokens ``prefix_hit_rates`` gives.
_CACHED_COLUMNS = ("expected_cached_tokens", "cached_tokens", "expected_offload_tokens")


class PrefixSums:
    """Σ cached and Σ prompt tokens over the requests that have both, per cached column,
    gathered a part of the requests at a time (sums of whole numbers: the same however
    the requests are split); ``rates()`` is ``prefix_hit_rates``."""

    def __init__(self) -> None:
        self.sums = {column: [0.0, 0.0, 0] for column in _CACHED_COLUMNS}
        self.excluded = 0
        self.offload = False

    @classmethod
    def of(cls, requests: Table) -> PrefixSums:
        sums = cls()
        sums.add(requests)
        return sums

    def add(self, requests: Table) -> None:
        usable = requests[~suspect_mask(requests)]
        self.excluded += len(requests) - len(usable)
        self.offload |= "expected_offload_tokens" in usable
        prompt = numbers(usable, "prompt_tokens")
        for column, sums in self.sums.items():
            cached = numbers(usable, column)
            known = np.isfinite(cached) & np.isfinite(prompt)
            sums[0] += float(cached[known].sum())
            sums[1] += float(prompt[known].sum())
            sums[2] += int(known.sum())

    def _rate(self, what: str) -> tuple[float | None, int, str | None]:
        """Σ cached / Σ prompt over the rows that have both; the rows counted; why ``None``."""
        cached, total, rows = self.sums[what]
        if rows and total > 0:
            return cached / total, rows, None
        if rows:
            why = "the requests' prompt_tokens sum to 0"
        elif self.excluded:
            why = f"no request with possible usage carries both prompt_tokens and {what} "
            why += f"({self.excluded} left out as usage_suspect)"
        else:
            why = f"no request carries both prompt_tokens and {what}"
        return None, rows, why

    def rates(self) -> PrefixSection:
        expected, _, why_expected = self._rate("expected_cached_tokens")
        observed, reported, why_observed = self._rate("cached_tokens")
        by_tier = None
        if self.offload and expected is not None:
            # The oracle's split when the server has an offload tier: GPU hits, CPU hits.
            offload, _, _ = self._rate("expected_offload_tokens")
            by_tier = frozen_map({"gpu": expected - (offload or 0.0), "cpu": offload})
        return PrefixSection(
            expected_hit_rate=expected,
            observed_hit_rate=observed,
            reported_requests=reported,
            usage_suspect_excluded=self.excluded or None,
            expected_reason=why_expected or None,
            observed_reason=why_observed or None,
            expected_hit_rate_by_tier=by_tier,
        )


def prefix_hit_rates(requests: Table) -> PrefixSection:
    """Expected (oracle) and observed (server-reported) cached share of prompt tokens.

    Observed is over the requests whose server reported ``cached_tokens`` and is
    ``None`` when it never did: unknown, never 0. Requests whose usage is impossible
    (``usage_suspect``) count in neither (``usage_suspect_excluded``); a rate that is
    ``None`` says why (``expected_reason``, ``observed_reason``).
    """
    return PrefixSums.of(requests).rates()


def latency_summary(latencies: Table, gaps: TokenGaps) -> dict[str, Stats]:
    """Each registered latency described over the completed requests (ITL over
    ``gaps``), with its ``max``: the part of ``summary.json`` that ``simulate`` reports too,
    from the same columns (``latency_columns``) and gaps (``probes.token_gaps``), as the
    same ``Stats``."""
    ok = np.asarray(latencies["ok"], dtype=bool)
    out: dict[str, Stats] = {}
    for metric in registered_latencies():
        per = latencies[metric.key][ok] if formula(metric) is not None else gaps.gap_s
        values = finite(per)
        out[metric.key] = Stats(
            **describe(values), max=float(values.max()) if values.size else None
        )
    return out


def summarize_frames(
    requests: Table | Parts,
    chunks: Table | Parts,
    client: Table,
    slo: Slo | None = None,
    picked: Picked | None = None,
) -> Summary:
    """The run summary (``summary.json``) from the run's tables: the requests and chunks
    as DataFrames or ``Columns`` (the bench's own end: no pandas), or as ``Parts`` read a
    part at a time (``summarize``); the client's health samples whole (a few a second).
    ``picked`` (vLLM's ``--percentile-metrics`` and ``--metric-percentiles``) adds the
    ``percentiles`` section, its streams selected in the same passes
    (``probes.percentiles``): the chunks' gaps are computed once a pass for both.

    Nothing of the requests or chunks is held whole: each figure is reduced a part at a
    time, the quantiles by ``runtime.quantiles.Selection``'s passes over the parts, so
    the memory is a part's and a few arrays of a selection's, not the run's (the
    completed requests' ids are held, as bytes, to pick their chunks). A table given
    whole is one part: the same code, and the same numbers to the last bit."""
    requests, chunks = parts_of(requests), parts_of(chunks)
    reading = _RequestReading(requests, picked)
    stats = reading.select()
    window = reading.window()
    done = IdSet(reading.done_ids)
    reading.done_ids = []
    chunk_reading = _ChunkReading(chunks, done, picks_itl(picked))
    gaps_selected = select_passes(chunk_reading.itl_parts, levels_of(picked))
    itl = gaps_selected.get(ITL.key)
    kind = prefill_kind(longest_first(reading.prompt_medians(stats)))
    late = reading.late_pass(slo, chunk_reading.worse_than(slo.itl_s) if slo else {}, kind)
    latencies = {}
    for metric in registered_latencies():  # ITL (no per-request formula) from the chunks
        selection = itl if formula(metric) is None else stats.get(metric.key)
        latencies[metric.key] = Stats(**(selection or Selection()).describe())
    gaps = itl.count if itl is not None else 0
    stalls = stall_summary(chunk_reading.stalls(kind, late, gaps))
    return Summary(
        requests=RequestsSection(
            total=reading.total,
            completed=reading.completed,
            failed=reading.total - reading.completed,
            warmup_excluded=reading.rows - reading.total,
            by_kind=frozen_map(reading.counts.by_kind()),
        ),
        errors=frozen_map(reading.counts.by_error()),
        error_messages=reading.counts.top_messages(TOP_ERROR_MESSAGES),
        latencies=frozen_map(latencies),
        throughput=throughput_of(reading.completed, reading.tokens, reading.excluded, window),
        goodput=goodput_of(late.good, reading.total, window, slo) if slo else None,
        prefix=reading.prefix.rates(),
        usage_suspect=reading.suspects.section(),
        chunks=chunk_reading.counts(),
        stalls=stalls,
        client=health_of(
            _described(stats.get(DISPATCH_LAG.key)),
            _described(stats.get("own_lag_s")).p99,
            _described(stats.get("concurrency_wait_s")),
            stats["concurrency_wait_s"].describe()["max"]
            if "concurrency_wait_s" in stats
            else None,
            client,
            window,
        ),
        percentiles=(
            frozen_map(picked_section(picked, stats | gaps_selected))
            if picked is not None
            else None
        ),
    )


def _described(selection: Selection | None) -> Distribution:
    """A selection's distribution (no ``max``: the client's lags carry none)."""
    found = (selection or Selection()).describe()
    return Distribution(**{key: value for key, value in found.items() if key != "max"})


@dataclass
class _LatePass:
    """What the requests give once their ITL and kinds are known: the good requests, and
    the long prompts' send, first token and TTFT (their prefills: the stall events)."""

    good: int = 0
    long_ids: list[Any] | None = None
    starts: list[float] | None = None
    ends: list[float] | None = None
    ttfts: list[float] | None = None


class _RequestReading:
    """The requests' part of the summary, read a part at a time."""

    def __init__(self, parts: Parts, picked: Picked | None = None) -> None:
        self.parts, self.picked = parts, picked
        self.rows = self.total = self.completed = self.excluded = 0
        self.tokens = 0.0
        self.start, self.end = math.inf, -math.inf
        self.counts, self.prefix, self.suspects = RequestCounts(), PrefixSums(), SuspectCounts()
        self.done_ids: list[np.ndarray] = []

    def select(self) -> dict[str, Selection]:
        """Every distribution over the requests (pass 0 also counts)."""
        return select_passes(self._values, levels_of(self.picked))

    def _values(self, pass_number: int) -> Iterator[dict[str, np.ndarray]]:
        for part in self.parts():
            runs = measured(part)
            ok = completed_mask(runs)
            latencies = latency_columns(runs)
            if pass_number == 0:
                self._count(part, runs, ok)
            lag, wait = latencies[DISPATCH_LAG.key], latencies["concurrency_wait_s"]
            values = {
                metric.key: latencies[metric.key][ok]
                for metric in registered_latencies()
                if formula(metric) is not None
            }
            values |= {
                DISPATCH_LAG.key: lag,
                "concurrency_wait_s": wait,
                "own_lag_s": lag - np.nan_to_num(wait, nan=0.0),
            }
            done = runs[ok]
            kinds = np.asarray(texts(done, "kind", NO_KIND), dtype=object)
            prompts = numbers(done, "prompt_tokens")
            for kind in dict.fromkeys(kinds.tolist()):
                values[f"prompt:{kind}"] = prompts[kinds == kind]
            yield values | picked_values(self.picked, runs, ok, latencies)

    def _count(self, part: Table, runs: Table, ok: np.ndarray) -> None:
        self.rows += len(part)
        self.total += len(runs)
        self.completed += int(ok.sum())
        counts, excluded = possible_tokens(runs, ok)
        self.tokens += float(counts.sum())
        self.excluded += excluded
        start, end = window_bounds(runs)
        self.start, self.end = min(self.start, start), max(self.end, end)
        done = runs[ok]
        self.counts.add(runs)
        self.prefix.add(done)
        self.suspects.add(done)
        self.done_ids.append(np.asarray(done.get("id", []), dtype=object))

    def window(self) -> Window:
        return Window.between(self.start, self.end)

    def prompt_medians(self, stats: dict[str, Selection]) -> dict[str, float]:
        medians = {}
        for name, selection in stats.items():
            if name.startswith("prompt:"):
                p50 = selection.describe()["p50"]
                medians[name.removeprefix("prompt:")] = float("nan") if p50 is None else p50
        return dict(sorted(medians.items()))

    def late_pass(self, slo: Slo | None, worse: dict[Any, float], kind: str | None) -> _LatePass:
        """The good requests (with ``slo``; ``worse``: the requests whose worst gap broke
        its ITL bound) and, with a prefill ``kind``, its requests' prefills."""
        late = _LatePass()
        if kind is not None:
            late.long_ids, late.starts, late.ends, late.ttfts = [], [], [], []
        if not slo and kind is None:
            return late
        for part in self.parts():
            runs = measured(part)
            latencies = latency_columns(runs)
            if slo:
                late.good += int(meets_slo(latencies, worse, slo).sum())
            if kind is not None:
                ok = completed_mask(runs)
                done = runs[ok]
                long = np.asarray(texts(done, "kind", NO_KIND), dtype=object) == kind
                late.long_ids += np.asarray(done["id"], dtype=object)[long].tolist()
                late.starts += numbers(done, "sent_s")[long].tolist()
                late.ends += numbers(done, "first_token_s")[long].tolist()
                late.ttfts += np.asarray(latencies[TTFT.key], float)[ok][long].tolist()
        return late


class _ChunkReading:
    """The chunks' part of the summary (the completed requests' ITL gaps, how tokens
    arrived, the stall events' decode gaps), read a part at a time."""

    def __init__(self, parts: Parts, done: IdSet, picked_itl: bool = False) -> None:
        self.parts, self.done, self.picked_itl = parts, done, picked_itl
        self.rows = self.tokens = self.multi = 0

    def gap_parts(self) -> Iterator[tuple[TokenGaps, Columns, int]]:
        for tokens, carried in token_chunk_parts(self.parts(), self.done.contains):
            yield chunk_gaps(tokens), tokens, carried

    def itl_parts(self, pass_number: int) -> Iterator[dict[str, np.ndarray]]:
        for gaps, tokens, carried in self.gap_parts():
            if pass_number == 0:
                n = np.asarray(tokens["n_tokens"], dtype=np.int64)[carried:]
                self.rows += int(n.size)
                self.tokens += int(n.sum())
                self.multi += int((n > 1).sum())
            yield {ITL.key: gaps.gap_s} | (
                {PICKED + ITL.key: gaps.gap_s} if self.picked_itl else {}
            )

    def counts(self) -> ChunksSection:
        """``token_gaps.chunk_counts`` of the completed requests' chunks."""
        return ChunksSection(
            count=self.rows,
            tokens=self.tokens,
            multi_token=self.multi,
            multi_token_share=self.multi / self.rows if self.rows else None,
        )

    def worse_than(self, bound: float | None) -> dict[Any, float]:
        """The worst gap of each request whose worst gap exceeds ``bound`` (the only
        requests ``meets_slo`` needs to know the worst gap of)."""
        if bound is None:
            return {}
        worse: dict[Any, float] = {}
        for gaps, _, _ in self.gap_parts():
            for request, worst in gaps.per_request("max").items():
                if worst > bound:
                    worse[request] = max(worst, worse.get(request, worst))
        return worse

    def stalls(self, kind: str | None, late: _LatePass, gaps: int) -> RunStalls:
        """``stall_events.run_stalls`` over the parts: the decode gaps are those of the
        requests not of the prefill ``kind``."""
        if kind is None or late.long_ids is None:
            return RunStalls.none(gaps)
        long_ids = set(late.long_ids)

        def decode() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for part_gaps, _, _ in self.gap_parts():
                keep = ~gaps_of_requests(part_gaps, long_ids)
                yield part_gaps.gap_s[keep], part_gaps.t_s[keep]

        events = StallEvents.measure_parts(late.starts, late.ends, late.ttfts, decode)
        return RunStalls(kind, events, gaps)


def summarize(run_dir: RunDir | str | Path, slo: Slo | None = None) -> Summary:
    """The summary of a run directory (what ``summary.json`` holds), read a part at a
    time (``RunTables.parts``) and without pandas."""
    tables = Run.at(run_dir).tables
    return summarize_frames(
        lambda: tables.parts(REQUESTS_TABLE, summary_columns()),
        lambda: tables.parts(CHUNKS_TABLE),
        tables.columns(CLIENT_TABLE),
        slo,
    )
