"""A run's per-request results in formats other tools read.

* ``csv`` — one row per measured request: its id, kind, status, token counts, cached and
  expected cached tokens, and its latencies in milliseconds (TTFT and E2E from the
  intended and from the actual send, TPOT), plus the error class and message.
* ``vllm-json`` — the result file ``vllm bench serve --save-result`` writes, with its
  keys and units (milliseconds for the ``*_ms`` statistics, seconds in the per-request
  lists), so scripts and dashboards made for vLLM's results read ours. vLLM times from
  the moment a request is sent and its ITL is per streamed chunk, so these figures are
  from the actual send and per chunk (our summary's ITL is per token, from the intended
  send: see ``summary.json``). Every key vLLM 0.32 writes is there, its peaks
  (``max_output_tokens_per_s``, ``max_concurrent_requests``) by vLLM's one-second
  buckets and ``queue_times`` as each send's lateness past its intended time.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import numpy as np
import pandas as pd

from probes.latency import completed_mask, measured, request_latencies
from runfmt.run import Run
from runfmt.runinfo import RunInfo, label_text
from runtime.quantiles import quantile

FORMATS = ("csv", "vllm-json")
#: CSV columns: (header, requests column or derived latency, scale).
_MS = 1e3


def _latency_frame(requests: pd.DataFrame) -> pd.DataFrame:
    runs = measured(requests).reset_index(drop=True)
    lat = request_latencies(runs).reset_index(drop=True)
    sent = pd.to_numeric(runs["sent_s"], errors="coerce")
    first = pd.to_numeric(runs["first_token_s"], errors="coerce")
    end = pd.to_numeric(runs["end_s"], errors="coerce")
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
            "ttft_ms": lat["ttft_s"] * _MS,
            "ttft_from_send_ms": (first - sent) * _MS,
            "tpot_ms": lat["tpot_s"] * _MS,
            "e2e_ms": lat["e2e_s"] * _MS,
            "e2e_from_send_ms": (end - sent) * _MS,
            "error_kind": runs.get("error_kind"),
            "error_message": runs.get("error_message"),
        }
    )


def to_csv(requests: pd.DataFrame) -> str:
    """The measured requests as CSV (latencies in ms; empty cells where unknown)."""
    buffer = io.StringIO()
    _latency_frame(requests).to_csv(buffer, index=False, quoting=csv.QUOTE_MINIMAL)
    return buffer.getvalue()


def _stats(values: np.ndarray, name: str) -> dict[str, float]:
    values = values[np.isfinite(values)] * _MS
    if not values.size:
        return {f"{k}_{name}_ms": 0.0 for k in ("mean", "median", "std", "p99")}
    return {
        f"mean_{name}_ms": float(values.mean()),
        f"median_{name}_ms": float(np.median(values)),
        f"std_{name}_ms": float(values.std()),
        f"p99_{name}_ms": quantile(values, 0.99),
    }


def _chunk_gaps(chunks: pd.DataFrame) -> dict[str, list[float]]:
    """Seconds between consecutive streamed chunks of each request (vLLM's ITL)."""
    if chunks.empty:
        return {}
    rows = chunks.sort_values(["request_id", "t_s"])
    out: dict[str, list[float]] = {}
    for rid, times in rows.groupby("request_id")["t_s"]:
        out[str(rid)] = np.diff(times.to_numpy(dtype=float)).tolist()
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


def to_vllm_json(run: Run) -> str:
    """``vllm bench serve``'s result JSON for this run."""
    requests, chunks = run.tables.requests, run.tables.chunks
    runs = measured(requests).reset_index(drop=True)
    ok = completed_mask(runs)
    done = runs[ok]
    sent = pd.to_numeric(done["sent_s"], errors="coerce").to_numpy(dtype=float)
    first = pd.to_numeric(done["first_token_s"], errors="coerce").to_numpy(dtype=float)
    end = pd.to_numeric(done["end_s"], errors="coerce").to_numpy(dtype=float)
    out_tokens = pd.to_numeric(done["output_tokens"], errors="coerce").fillna(0).to_numpy()
    in_tokens = pd.to_numeric(done["prompt_tokens"], errors="coerce").fillna(0).to_numpy()
    all_sent = pd.to_numeric(runs["sent_s"], errors="coerce").to_numpy(dtype=float)
    all_end = pd.to_numeric(runs["end_s"], errors="coerce").to_numpy(dtype=float)
    duration = float(np.nanmax(all_end) - np.nanmin(all_sent)) if len(runs) and ok.any() else 0.0
    ttft = first - sent
    tpot = np.where(out_tokens > 1, (end - first) / np.maximum(out_tokens - 1, 1), np.nan)
    intended = pd.to_numeric(runs["intended_s"], errors="coerce").to_numpy(dtype=float)
    # The completed requests' chunks: vLLM's ITL and peaks count only those.
    done_chunks = chunks[chunks["request_id"].isin(set(done["id"]))] if not chunks.empty else chunks
    peak_tokens, peak_active = _peaks(sent, end, done_chunks)
    gaps = _chunk_gaps(done_chunks)
    itls = [gaps.get(str(rid), []) for rid in done["id"]]
    flat = np.asarray([g for per in itls for g in per], dtype=float)
    info = run.info
    sections = (info or RunInfo.from_json({})).typed
    target, plan, load = sections.target, sections.plan, sections.load
    spec_load = run.spec.load if run.spec is not None else None
    rate, cv = (spec_load.rate, spec_load.cv) if spec_load is not None else (None, None)
    started = info.wall_t0 if info is not None else None
    labels = info.labels if info is not None else {}
    doc: dict[str, Any] = {
        "date": pd.Timestamp(started, unit="s").strftime("%Y%m%d-%H%M%S") if started else None,
        "endpoint_type": target.api,
        "backend": target.flavour,
        # vLLM's --label (one string) and its --metadata pairs, at the top level as vLLM
        # writes them: ``--label`` pairs, and the one named ``label`` as the label.
        "label": labels.get("label") or label_text(labels) or None,
        "model_id": target.model,
        "tokenizer_id": None,
        "num_prompts": len(runs),
        "request_rate": "inf" if rate is None or rate == float("inf") else rate,
        "burstiness": float((cv and 1 / cv**2) or 1.0),
        "max_concurrency": load.max_concurrency or plan.concurrency,
        "duration": duration,
        "completed": int(ok.sum()),
        "failed": int((~ok).sum()),
        "total_input_tokens": int(in_tokens.sum()),
        "total_output_tokens": int(out_tokens.sum()),
        "request_throughput": ok.sum() / duration if duration else 0.0,
        "request_goodput": None,
        "output_throughput": out_tokens.sum() / duration if duration else 0.0,
        "total_token_throughput": (in_tokens.sum() + out_tokens.sum()) / duration
        if duration
        else 0.0,
        "input_lens": in_tokens.astype(int).tolist(),
        "output_lens": out_tokens.astype(int).tolist(),
        "ttfts": ttft.tolist(),
        "itls": itls,
        "latencies": (end - sent).tolist(),
        "errors": runs.loc[~ok, "error_message"].fillna("").astype(str).tolist(),
        # Seconds each request waited in the client past its intended send (vLLM's
        # client_queue_time: a late dispatch shows here), every request as in vLLM's list.
        "queue_times": (all_sent - intended).tolist(),
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_active,
        # vLLM's inverse real-time factor, for audio input; 0.0 for text as vLLM writes.
        "rtfx": 0.0,
    }
    doc |= _stats(ttft, "ttft") | _stats(tpot, "tpot") | _stats(flat, "itl")
    doc |= _stats(end - sent, "e2el")
    doc |= {k: v for k, v in labels.items() if k not in doc}
    return json.dumps(doc, default=float)
