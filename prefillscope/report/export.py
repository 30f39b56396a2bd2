"""A run's per-request results in formats other tools read.

* ``csv`` — one row per measured request: its id, kind, status, token counts, cached and
  expected cached tokens, and its latencies in milliseconds (TTFT and E2E from the
  intended and from the actual send, TPOT), plus the error class and message.
* ``vllm-json`` — the result file ``vllm bench serve --save-result`` writes, with its
  keys and units (milliseconds for the ``*_ms`` statistics, seconds in the per-request
  lists), so scripts and dashboards made for vLLM's results read ours. vLLM times from
  the moment a request is sent and its ITL is per streamed event, so these figures are
  from the actual send and per event (a read of n tokens: its gap, then n − 1 zeros;
  our summary's ITL is per token, from the intended send: see ``summary.json``). Every
  key vLLM 0.32 writes is there, its peaks
  (``max_output_tokens_per_s``, ``max_concurrent_requests``) by vLLM's one-second
  buckets and ``queue_times`` as each send's lateness past its intended time. As in
  vLLM, the per-request lists cover every measured request (a failed one's TTFT and
  latency 0, its error message in ``errors``, "" for a completed one); the statistics
  are those of the metrics and percentiles asked for (``VllmJsonOptions``: vLLM's
  ``--percentile-metrics``/``--metric-percentiles``, default ``ttft,tpot,itl`` at 99,
  ``client_queue_time`` and ``e2el_including_client_queue`` where a ``--max-concurrency``
  cap queued requests); ``request_goodput`` is the completed requests within every
  ``--goodput`` bound (from the send) per second, null without one; ``generated_texts``
  is each request's streamed text when the run kept it; without ``--save-detailed`` the
  per-request lists other than ``latencies`` and ``queue_times`` are left out, as vLLM
  leaves them.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from probes.latency import completed_mask, measured, request_latencies
from probes.percentiles import DEFAULT_METRICS, DEFAULT_PERCENTILES, METRICS
from runfmt.metrics import E2E, E2E_SENT, TPOT, TTFT, TTFT_SENT
from runfmt.run import Run
from runfmt.runinfo import RunInfo, label_text
from runtime.quantiles import quantile

FORMATS = ("csv", "vllm-json")
#: The per-request lists vLLM leaves out without ``--save-detailed``.
DETAILED_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls",
                 "generated_texts", "errors")  # fmt: skip
#: CSV columns: (header, requests column or derived latency, scale).
_MS = 1e3


def _latency_frame(requests: pd.DataFrame) -> pd.DataFrame:
    runs = measured(requests).reset_index(drop=True)
    lat = request_latencies(runs).reset_index(drop=True)
    sent = pd.to_numeric(runs["sent_s"], errors="coerce")
    return pd.DataFrame(
        {
            "id": runs["id"],
            "kind": runs.get("kind"),
            "status": runs["status"],
            "prompt_tokens": runs.get("prompt_tokens"),
            "output_tokens": runs.get("output_tokens"),
            "cached_tokens": runs.get("cached_tokens"),
            "expected_cached_tokens": runs.get("expected_cached_tokens"),
            "intended_s": runs.get("intended_s"),
            "sent_s": sent,
            "ttft_ms": lat[TTFT.key] * _MS,
            "ttft_from_send_ms": lat[TTFT_SENT.key] * _MS,
            "tpot_ms": lat[TPOT.key] * _MS,
            "e2e_ms": lat[E2E.key] * _MS,
            "e2e_from_send_ms": lat[E2E_SENT.key] * _MS,
            "error_kind": runs.get("error_kind"),
            "error_message": runs.get("error_message"),
        }
    )


def to_csv(requests: pd.DataFrame) -> str:
    """The measured requests as CSV (latencies in ms; empty cells where unknown)."""
    buffer = io.StringIO()
    _latency_frame(requests).to_csv(buffer, index=False, quoting=csv.QUOTE_MINIMAL)
    return buffer.getvalue()


def _stats(values: np.ndarray, name: str, percentiles: tuple[float, ...]) -> dict[str, float]:
    """vLLM's mean, median, std and ``p<P>`` of one metric in ms (0 for no samples, as
    vLLM's ``np.mean(values or 0)``), its percentiles by numpy's linear interpolation."""
    values = values[np.isfinite(values)] * _MS
    if not values.size:
        values = np.zeros(1)
    out = {
        f"mean_{name}_ms": float(values.mean()),
        f"median_{name}_ms": float(np.median(values)),
        f"std_{name}_ms": float(values.std()),
    }
    for p in percentiles:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}_{name}_ms"] = quantile(values, p / 100)
    return out


def _chunk_gaps(chunks: pd.DataFrame) -> dict[str, list[float]]:
    """Each request's gaps as vLLM's client records them (its ITL): one per streamed
    event, the time since the event before. A read that carried n tokens held n events
    read together, so it gives its gap then n − 1 gaps of 0 (the first read: n − 1
    zeros after the first token, whose time is the TTFT)."""
    if chunks.empty:
        return {}
    rows = chunks.sort_values(["request_id", "t_s"])
    out: dict[str, list[float]] = {}
    for rid, group in rows.groupby("request_id"):
        times = group["t_s"].to_numpy(dtype=float)
        counts = np.maximum(group["n_tokens"].to_numpy(dtype=int), 1)
        gaps: list[float] = [0.0] * int(counts[0] - 1)
        for gap, n in zip(np.diff(times), counts[1:], strict=True):
            gaps += [float(gap)] + [0.0] * int(n - 1)
        out[str(rid)] = gaps
    return out


def _peaks(sent: np.ndarray, end: np.ndarray, chunks: pd.DataFrame) -> tuple[float, int]:
    """vLLM's two peaks over one-second buckets counted from the first completed send:
    the most output tokens streamed in one bucket, and the most completed requests active
    in one (a request counts in every bucket from its send's to its end's, both ends
    included). Only completed requests count, as in vLLM; a chunk of n tokens adds n."""
    if not sent.size:
        return 0.0, 0
    t0 = float(np.nanmin(sent))
    buckets = int(np.ceil(float(np.nanmax(end)) - t0)) + 1
    tokens = np.zeros(buckets)
    if not chunks.empty:
        at = (chunks["t_s"].to_numpy(dtype=float) - t0).astype(int)
        keep = (at >= 0) & (at < buckets)
        np.add.at(tokens, at[keep], chunks["n_tokens"].to_numpy(dtype=float)[keep])
    active = np.zeros(buckets + 1)
    np.add.at(active, (sent - t0).astype(int), 1)
    np.add.at(active, np.minimum((end - t0).astype(int) + 1, buckets), -1)
    return float(tokens.max()), int(np.cumsum(active)[:buckets].max())


@dataclass(frozen=True)
class VllmJsonOptions:
    """What ``vllm bench serve`` was asked that shapes its result file: the percentile
    metrics and levels (``--percentile-metrics``/``--metric-percentiles``), the goodput
    SLO in ms (``--goodput``), whether per-request lists are kept (``--save-detailed``),
    and the run's ``--backend``, ``--label``, ``--tokenizer``, ``--metadata`` and ramp-up."""

    metrics: tuple[str, ...] = DEFAULT_METRICS
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    goodput_ms: dict[str, float] | None = None
    detailed: bool = True
    backend: str | None = None
    label: str | None = None
    #: vLLM's ``--tokenizer`` (else its ``--model``), as its ``tokenizer_id``.
    tokenizer_id: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    ramp: tuple[str, float, float] | None = None


def _seconds(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)


def _good(ttft: np.ndarray, tpot: np.ndarray, e2el: np.ndarray, slo_ms: dict[str, float]) -> int:
    """Completed requests within every bound of vLLM's ``--goodput`` (a TPOT of a
    one-token answer counts as 0, as vLLM's)."""
    values = {"ttft": ttft, "tpot": np.nan_to_num(tpot, nan=0.0), "e2el": e2el}
    good = np.ones(len(ttft), dtype=bool)
    for name, bound in slo_ms.items():
        good &= values[name] * _MS <= bound
    return int(good.sum())


def to_vllm_json(run: Run, options: VllmJsonOptions | None = None) -> str:
    """``vllm bench serve``'s result JSON for this run (``options``: what it was asked;
    default: the percentiles and SLO the run itself was summarised with)."""
    return json.dumps(vllm_result(run, options), default=float)


def run_options(run: Run) -> VllmJsonOptions:
    """The vLLM options a run was summarised with: its picked percentiles (vLLM's
    defaults when none were) and its SLO's TTFT, TPOT and E2E bounds as ``--goodput``."""
    sections = run.summary
    picked = (sections.percentiles if sections is not None else None) or {}
    names = {column: name for name, column in METRICS.items()}
    metrics = tuple(names[c] for c in picked if c in names) or DEFAULT_METRICS
    levels = next(iter(picked.values()), {}) if picked else {}
    percentiles = tuple(float(k[1:]) for k in levels) or DEFAULT_PERCENTILES
    goodput = sections.goodput if sections is not None else None
    slo = goodput.slo.bounds() if goodput is not None else ()
    bounds = {TTFT.key: "ttft", TPOT.key: "tpot", E2E.key: "e2el"}
    bounds_ms = {bounds[k]: v * _MS for k, v in slo if k in bounds}
    return VllmJsonOptions(metrics, percentiles, bounds_ms or None)


def vllm_result(run: Run, options: VllmJsonOptions | None = None) -> dict[str, Any]:
    """The result document (``to_vllm_json``) as a dict, keys in vLLM's order."""
    options = options or run_options(run)
    requests, chunks = run.tables.requests, run.tables.chunks
    runs = measured(requests).reset_index(drop=True)
    ok = np.asarray(completed_mask(runs), dtype=bool)
    sent, first, end = (_seconds(runs, c) for c in ("sent_s", "first_token_s", "end_s"))
    out_tokens = np.nan_to_num(_seconds(runs, "output_tokens")).astype(int)
    in_tokens = np.nan_to_num(_seconds(runs, "prompt_tokens")).astype(int)
    intended = _seconds(runs, "intended_s")
    released = _seconds(runs, "released_s")
    released = np.where(np.isnan(released), intended, released)
    duration = float(np.nanmax(end) - np.nanmin(sent)) if ok.any() else 0.0
    # vLLM's per-request values: a failed request's TTFT and latency are 0, its output 0
    ttft = np.where(ok, first - sent, 0.0)
    latency = np.where(ok, end - sent, 0.0)
    out_lens = np.where(ok, out_tokens, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_lens > 1, (end - first) / np.maximum(out_lens - 1, 1), np.nan)
    done = runs[ok]
    # The completed requests' chunks: vLLM's ITL and peaks count only those.
    done_chunks = chunks[chunks["request_id"].isin(set(done["id"]))] if not chunks.empty else chunks
    peak_tokens, peak_active = _peaks(sent[ok], end[ok], done_chunks)
    gaps = _chunk_gaps(done_chunks)
    itls = [
        gaps.get(str(rid), []) if good else [] for rid, good in zip(runs["id"], ok, strict=True)
    ]
    flat = np.asarray([g for per in itls for g in per], dtype=float)
    info = run.info
    recorded = info or RunInfo()
    target, plan, load = recorded.target, recorded.plan, recorded.load
    spec_load = run.spec.load if run.spec is not None else None
    rate, cv = (spec_load.rate, spec_load.cv) if spec_load is not None else (None, None)
    started = info.wall_t0 if info is not None else None
    labels = info.labels if info is not None else {}
    completed = int(ok.sum())
    total_out = int(out_lens.sum())
    doc: dict[str, Any] = {
        "date": pd.Timestamp(started, unit="s").strftime("%Y%m%d-%H%M%S") if started else None,
        "endpoint_type": options.backend or target.api,
        "backend": options.backend or target.flavour,
        # vLLM's --label (one string): bench's, else the run's ``--label label=…`` (or all
        # its pairs as text)
        "label": options.label or labels.get("label") or label_text(labels) or None,
        "model_id": target.model,
        "tokenizer_id": options.tokenizer_id,
        "num_prompts": len(runs),
        **dict(options.metadata),
        "request_rate": "inf" if rate is None or rate == float("inf") else rate,
        "burstiness": float((cv and 1 / cv**2) or 1.0),
        "max_concurrency": load.max_concurrency or plan.concurrency,
    }
    if options.ramp is not None:
        strategy, start_rps, end_rps = options.ramp
        doc |= {"ramp_up_strategy": strategy, "ramp_up_start_rps": start_rps,
                "ramp_up_end_rps": end_rps, "request_rate": "inf"}  # fmt: skip
    good = _good((first - sent)[ok], tpot[ok], (end - sent)[ok], options.goodput_ms or {})
    doc |= {
        "duration": duration,
        "completed": completed,
        "failed": int((~ok).sum()),
        "total_input_tokens": int(in_tokens[ok].sum()),
        "total_output_tokens": total_out,
        "request_throughput": completed / duration if duration else 0.0,
        "request_goodput": (good / duration if duration else 0.0) if options.goodput_ms else None,
        "output_throughput": total_out / duration if duration else 0.0,
        "total_token_throughput": (int(in_tokens[ok].sum()) + total_out) / duration
        if duration
        else 0.0,
        "input_lens": in_tokens.tolist(),
        "output_lens": out_lens.tolist(),
        "ttfts": ttft.tolist(),
        "itls": itls,
        "latencies": latency.tolist(),
        # The run clock's seconds when each request was sent (vLLM's perf_counter stamps:
        # a monotonic clock of its own too).
        "start_times": sent.tolist(),
        # Seconds each request waited in the client past its intended send (vLLM's
        # client_queue_time: a late dispatch shows here), every request as in vLLM's list.
        "queue_times": (sent - intended).tolist(),
        # The streamed text of each request ("" for a failed one, as vLLM's); null for
        # each when the run kept no text (bench keeps it for --save-result --save-detailed).
        "generated_texts": _texts(runs, ok),
        "errors": [
            "" if good_one else str(message or "")
            for good_one, message in zip(
                ok, runs.get("error_message", [None] * len(runs)), strict=True
            )
        ],
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_active,
        # vLLM's inverse real-time factor, for audio input; 0.0 for text as vLLM writes.
        "rtfx": 0.0,
    }
    values = {
        "ttft": (first - sent)[ok],
        "tpot": tpot[ok],
        "itl": flat,
        "e2el": (end - sent)[ok],
    }
    if load.max_concurrency is not None:  # vLLM's two, where a cap queued requests
        values["client_queue_time"] = (released - intended)[ok]
        if rate is not None and rate != float("inf"):
            values["e2el_including_client_queue"] = (end - intended)[ok]
    for name in METRICS:  # in the order vLLM writes them
        if name in options.metrics and name in values:
            doc |= _stats(values[name], name, options.percentiles)
    # the run's --label pairs at the top level, as vLLM writes its --metadata
    doc |= {k: v for k, v in labels.items() if k not in doc}
    if not options.detailed:
        for key in DETAILED_KEYS:
            doc.pop(key, None)
    return doc


def _texts(runs: pd.DataFrame, ok: np.ndarray) -> list[str | None]:
    if "output_text" not in runs or runs["output_text"].isna().all():
        return [None] * len(runs)
    return [
        (str(text) if isinstance(text, str) else "") if good else ""
        for text, good in zip(runs["output_text"], ok, strict=True)
    ]
