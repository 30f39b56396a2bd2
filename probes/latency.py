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

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from probes.client_limits import CPU_SATURATION_SHARE, CPU_SUSTAIN_S, DISPATCH_LAG_LIMIT_S
from probes.metric_registry import CLIENT_DISPATCH_LAG, DISPATCH_LAG, json_name
from probes.metric_registry import latencies as registered_latencies
from probes.request_counts import completed_mask, error_counts, error_messages, kind_counts
from probes.slo import Slo
from probes.stall_events import run_stalls, stall_summary
from probes.token_gaps import TokenGaps, chunk_counts, token_chunks, token_gaps
from probes.usage_counts import suspect_mask, usage_suspects
from runfmt.columns import Columns, Table, numbers
from runfmt.names import CHUNKS_TABLE, CLIENT_TABLE, REQUESTS_TABLE, WORKER_COLUMN
from runfmt.run import Run
from runfmt.rundir import RunDir
from runfmt.tables import measured_rows as measured
from runtime.quantiles import describe, finite

if TYPE_CHECKING:
    import pandas as pd


def latency_columns(requests: Table, ids: Any = None) -> Columns:
    """Per-request timings in seconds, one row per request, in the requests' order.

    Columns: ``id`` (``ids`` when given, else the requests' ``id``, else their position),
    each registered latency computed per request by its own formula
    (``probes.metric_registry``: ``ttft_s``, ``ttft_sent_s``, ``tpot_s``, ``e2e_s``,
    ``e2e_sent_s`` …), ``dispatch_lag_s``, ``concurrency_wait_s``, ``output_tokens`` and
    ``ok``. A value that cannot be computed (no first token, one output token) is NaN.
    """
    per_request = [m for m in (*registered_latencies(), DISPATCH_LAG) if m.formula]
    names = {"intended_s", "released_s", "output_tokens"}
    names |= {name for metric in per_request for name in metric.inputs}
    raw = {name: numbers(requests, name) for name in sorted(names)}
    intended, released = raw["intended_s"], raw["released_s"]
    released = np.where(np.isnan(released), intended, released)  # no cap, or an older run
    if ids is None:
        ids = np.asarray(requests["id"]) if "id" in requests else np.arange(len(requests))
    return Columns(
        {
            "id": np.asarray(ids),
            **{metric.key: metric.values(raw) for metric in per_request},
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


def measured_window(requests: Table) -> Window:
    """The window throughput is measured over (see the module docstring)."""
    starts = finite(np.fmin(numbers(requests, "intended_s"), numbers(requests, "sent_s")))
    ends = finite(numbers(requests, "end_s"))
    if starts.size == 0 or ends.size == 0:
        return Window(float("nan"), float("nan"))
    return Window(float(starts.min()), float(ends.max()))


def possible_tokens(requests: Table, ok: np.ndarray) -> tuple[np.ndarray, int]:
    """The output tokens of the rows ``ok`` selects, an impossible (negative) count — a
    server's usage that cannot be right — as 0; and how many were left out so."""
    counts = numbers(requests, "output_tokens")[ok]
    impossible = counts < 0
    return np.where(impossible, 0.0, np.nan_to_num(counts)), int(impossible.sum())


def throughput(requests: Table, window: Window) -> dict[str, Any]:
    """Completed requests and their output tokens per second over the measured window
    (a negative token count, which a server's usage can claim, is left out and counted
    in ``output_tokens_excluded``)."""
    ok = completed_mask(requests)
    counts, excluded = possible_tokens(requests, ok)
    tokens = float(counts.sum())
    rate = (1.0 / window.seconds) if window.valid else None
    extra = {"output_tokens_excluded": excluded} if excluded else {}
    return {
        "requests_per_s": int(ok.sum()) * rate if rate is not None else None,
        "output_tokens_per_s": tokens * rate if rate is not None else None,
        "output_tokens": int(tokens),
        "window_s": window.seconds if window.valid else None,
        "start_s": window.start_s if window.valid else None,
        "end_s": window.end_s if window.valid else None,
    } | extra


def throughput_bins(requests: Table, window: Window, bins: int) -> pd.DataFrame:
    """Throughput in ``bins`` equal slices of the window, by completion time.

    The mean over bins equals the run's throughput; their spread is what a comparison
    of two runs' throughput resamples (one run has one throughput, but many slices).
    """
    import pandas as pd

    if not window.valid or bins < 1:
        return pd.DataFrame({"requests_per_s": [], "output_tokens_per_s": []})
    ok = completed_mask(requests)
    end = numbers(requests, "end_s")[ok]
    tokens, _ = possible_tokens(requests, ok)
    edges = np.linspace(window.start_s, window.end_s, bins + 1)
    slot = np.clip(np.searchsorted(edges, end, side="right") - 1, 0, bins - 1)
    width = window.seconds / bins
    return pd.DataFrame(
        {
            "requests_per_s": np.bincount(slot, minlength=bins) / width,
            "output_tokens_per_s": np.bincount(slot, weights=tokens, minlength=bins) / width,
        }
    )


def meets_slo(latencies: Table, itl_max_s: dict[Any, float], slo: Slo) -> np.ndarray:
    """True for each completed request meeting every SLO given.

    ``latencies`` is ``latency_columns()``; ``itl_max_s`` the worst per-token gap by
    request id. A metric a request does not have (no gaps or TPOT for a one-token answer)
    cannot be missed.
    """
    good = np.asarray(latencies["ok"], dtype=bool).copy()
    bounds = {"ttft_s": slo.ttft_s, "e2e_s": slo.e2e_s, "tpot_s": slo.tpot_s}
    for column, bound in bounds.items():
        if bound is not None:
            good &= ~(np.asarray(latencies[column], dtype=float) > bound)
    if slo.itl_s is not None:
        ids = np.asarray(latencies["id"], dtype=object).tolist()
        worst = np.array([itl_max_s.get(i, np.nan) for i in ids], dtype=float)
        good &= ~(worst > slo.itl_s)
    return good


def goodput(good: np.ndarray, window: Window, slo: Slo) -> dict[str, Any]:
    """Share and rate of measured requests that met every SLO."""
    count = int(good.sum())
    return {
        "slo": slo.to_dict(),
        "requests": count,
        "share": count / good.size if good.size else None,
        "requests_per_s": count / window.seconds if window.valid else None,
    }


def _sustained_max(t: np.ndarray, share: np.ndarray, span_s: float) -> float:
    """Highest mean CPU share over any full ``span_s`` window (whole run if shorter)."""
    if t[-1] - t[0] < span_s:
        return float(share.mean())
    cumulative = np.concatenate([[0.0], np.cumsum(share)])
    ends = np.flatnonzero(t - t[0] >= span_s)
    starts = np.searchsorted(t, t[ends] - span_s, side="right")
    return float(((cumulative[ends + 1] - cumulative[starts]) / (ends + 1 - starts)).max())


def cpu_shares(t: np.ndarray, share: np.ndarray, owner: np.ndarray | None) -> dict | None:
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
            {
                "worker": int(k),
                "mean": float(share[mine].mean()),
                "max": float(share[mine].max()),
                "sustained_max": _sustained_max(t[mine], share[mine], CPU_SUSTAIN_S),
            }
        )
    busiest = max(workers, key=lambda w: w["sustained_max"])
    cpu = {"mean": busiest["mean"], "max": float(share.max())}
    cpu["sustained_max"] = busiest["sustained_max"]
    if sharded:
        cpu["busiest_worker"] = busiest["worker"]
        cpu["cores_mean"] = sum(w["mean"] for w in workers)
        cpu["workers"] = workers
    return cpu


def client_health(
    dispatch_lag_s: np.ndarray,
    client: Table,
    window: Window,
    concurrency_wait_s: np.ndarray | None = None,
) -> dict:
    """Dispatch lag, event-loop lag and CPU share of the client, and whether they limited it.

    ``concurrency_wait_s``: each request's wait for a ``--max-concurrency`` slot, part of
    its dispatch lag, reported when any request waited. A cap is the user's choice, so
    its queue does not make the client limited: the bound is checked on the lag past
    the slot (``sent − released``), the client's own."""
    lag = describe(dispatch_lag_s)
    waits = finite(concurrency_wait_s) if concurrency_wait_s is not None else np.empty(0)
    waited = describe(waits)
    own = dispatch_lag_s
    if concurrency_wait_s is not None:
        own = dispatch_lag_s - np.nan_to_num(concurrency_wait_s, nan=0.0)
    own_p99 = describe(own)["p99"]
    reasons: list[str] = []
    if own_p99 is not None and own_p99 > DISPATCH_LAG_LIMIT_S:
        label = DISPATCH_LAG.named("p99")
        reason = f"{label} {own_p99 * 1e3:.1f} ms > {DISPATCH_LAG_LIMIT_S * 1e3:.0f} ms"
        if waited["p99"] is not None and waited["p99"] > 0:
            reason += " past the --max-concurrency slot wait"
        reasons.append(reason)
    loop_lag: dict | None = None
    cpu: dict | None = None
    if not client.empty:
        t = numbers(client, "t_s")
        inside = np.isfinite(t)
        if window.valid:
            inside &= (t >= window.start_s) & (t <= window.end_s)
        order = np.flatnonzero(inside)[np.argsort(t[inside], kind="stable")]
        loop = finite(numbers(client, "loop_lag_s")[order])
        if loop.size:
            loop_lag = describe(loop) | {"max": float(loop.max())}
        owner = None
        if WORKER_COLUMN in client:
            owner = numbers(client, WORKER_COLUMN)[order]
            owner = np.where(np.isnan(owner), -1.0, owner)
        cpu = cpu_shares(t[order], numbers(client, "cpu_share")[order], owner)
        if cpu is not None and cpu["sustained_max"] >= CPU_SATURATION_SHARE:
            which = f" (worker {cpu['busiest_worker']})" if "workers" in cpu else ""
            reasons.append(
                f"client CPU at {cpu['sustained_max']:.0%} of a core{which} over "
                f"{CPU_SUSTAIN_S:g} s (saturated at {CPU_SATURATION_SHARE:.0%})"
            )
    health = {
        "dispatch_lag_s": lag,
        json_name(CLIENT_DISPATCH_LAG): lag["p99"],
        "loop_lag_s": loop_lag,
        "cpu_share": cpu,
        "limited": bool(reasons),
        "reasons": reasons,
    }
    if waits.size and waits.max() > 0:  # a --max-concurrency cap held requests back
        health["concurrency_wait_s"] = waited
    return health


def _hit_rate(
    cached: np.ndarray, prompt: np.ndarray, what: str, excluded: int
) -> tuple[float | None, int, str | None]:
    """Σ cached / Σ prompt over the rows that have both; the rows counted; why ``None``."""
    known = np.isfinite(cached) & np.isfinite(prompt)
    total = prompt[known].sum()
    if known.any() and total > 0:
        return float(cached[known].sum() / total), int(known.sum()), None
    if known.any():
        why = "the requests' prompt_tokens sum to 0"
    elif excluded:
        why = f"no request with possible usage carries both prompt_tokens and {what} "
        why += f"({excluded} left out as usage_suspect)"
    else:
        why = f"no request carries both prompt_tokens and {what}"
    return None, int(known.sum()), why


def prefix_hit_rates(requests: Table) -> dict[str, Any]:
    """Expected (oracle) and observed (server-reported) cached share of prompt tokens.

    Observed is over the requests whose server reported ``cached_tokens`` and is
    ``None`` when it never did: unknown, never 0. Requests whose usage is impossible
    (``usage_suspect``) count in neither (``usage_suspect_excluded``); a rate that is
    ``None`` says why (``expected_reason``, ``observed_reason``).
    """
    usable = requests[~suspect_mask(requests)]
    excluded = len(requests) - len(usable)
    prompt = numbers(usable, "prompt_tokens")
    expected, _, why_expected = _hit_rate(
        numbers(usable, "expected_cached_tokens"), prompt, "expected_cached_tokens", excluded
    )
    observed, reported, why_observed = _hit_rate(
        numbers(usable, "cached_tokens"), prompt, "cached_tokens", excluded
    )
    rates: dict[str, Any] = {
        "expected_hit_rate": expected,
        "observed_hit_rate": observed,
        "reported_requests": reported,
    }
    if excluded:
        rates["usage_suspect_excluded"] = excluded
    if why_expected:
        rates["expected_reason"] = why_expected
    if why_observed:
        rates["observed_reason"] = why_observed
    if "expected_offload_tokens" in usable and expected is not None:
        # The oracle's split when the server has an offload tier: GPU hits, CPU hits.
        offload, _, _ = _hit_rate(
            numbers(usable, "expected_offload_tokens"), prompt, "expected_offload_tokens", excluded
        )
        rates["expected_hit_rate_by_tier"] = {"gpu": expected - (offload or 0.0), "cpu": offload}
    return rates


def latency_summary(latencies: Table, gaps: TokenGaps) -> dict[str, Any]:
    """Each registered latency described over the completed requests (ITL over
    ``gaps``), with its ``max``: the part of ``summary.json`` that ``simulate`` reports too,
    from the same columns (``latency_columns``) and gaps (``probes.token_gaps``)."""
    ok = np.asarray(latencies["ok"], dtype=bool)
    out: dict[str, Any] = {}
    for metric in registered_latencies():
        per = latencies[metric.key][ok] if metric.formula is not None else gaps.gap_s
        values = finite(per)
        out[metric.key] = describe(values) | {"max": float(values.max()) if values.size else None}
    return out


def summarize_frames(
    requests: Table,
    chunks: Table,
    client: Table,
    slo: Slo | None = None,
) -> dict[str, Any]:
    """The run summary (``summary.json``) from the run's tables, as DataFrames or as
    ``Columns`` (the bench's own end: no pandas)."""
    runs = measured(requests)
    ok = completed_mask(runs)
    done = runs[ok]
    window = measured_window(runs)
    latencies = latency_columns(runs)
    done_ids = done.get("id", [])
    tokens = token_chunks(chunks, done_ids)
    gaps = token_gaps(tokens)
    summary: dict[str, Any] = {
        "requests": {
            "total": len(runs),
            "completed": int(ok.sum()),
            "failed": int((~ok).sum()),
            "warmup_excluded": int(len(requests) - len(runs)),
            "by_kind": kind_counts(runs),
        },
        "errors": error_counts(runs),
        "error_messages": error_messages(runs),
    }
    summary |= latency_summary(latencies, gaps)
    summary["throughput"] = throughput(runs, window)
    summary["goodput"] = (
        goodput(meets_slo(latencies, gaps.per_request("max"), slo), window, slo) if slo else None
    )
    summary["prefix"] = prefix_hit_rates(done)
    summary["usage_suspect"] = usage_suspects(done)
    summary["chunks"] = chunk_counts(tokens)
    summary["stalls"] = stall_summary(run_stalls(done, latencies["ttft_s"][ok], gaps))
    summary["client"] = client_health(
        latencies["dispatch_lag_s"], client, window, latencies["concurrency_wait_s"]
    )
    return summary


def summarize(run_dir: RunDir | str | Path, slo: Slo | None = None) -> dict[str, Any]:
    """The summary of a run directory (what ``summary.json`` holds), read without pandas."""
    tables = Run.at(run_dir).tables
    columns = (tables.columns(name) for name in (REQUESTS_TABLE, CHUNKS_TABLE, CLIENT_TABLE))
    return summarize_frames(*columns, slo)
