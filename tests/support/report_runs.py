"""Run directories for the report tests, generated from a small interference model.

Decode streams tick at a steady inter-token latency; long prompts arrive now and then
and, for the length of their prefill, stall every decode token that falls inside it —
the pattern the report's ITL-over-time plot exists to show. The run directory is written
by the tests' one fabricator (``diagnose_runs.write_run``: records, chunk events, raw
server samples in long format, as ``bench`` writes them), and the summary comes from
``probes.latency``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from diagnose_runs import write_run

from loadgen.records import ChunkEvent, ErrorKind, RequestRecord, Status
from probes.latency import summarize_frames
from probes.server_summary import server_summary
from probes.timeline import server_series
from runfmt.rundir import RunDir

HOSTILE = "<script>alert(1)</script>"


@dataclass
class RunShape:
    """What to generate."""

    decodes: int = 120
    long_prompts: int = 6
    failures: int = 3
    duration_s: float = 30.0
    itl_s: float = 0.02
    prefill_s: float = 0.4
    pool: str | None = "embedded"  # "embedded" | "vllm" | None
    status: str = "complete"
    model: str = "llama-3.1-8b"
    error_message: str = "upstream overloaded"
    summary: bool = True
    diagnosis: bool = True
    seed: int = 7


def _token_times(start: float, count: int, itl: float, stalls: np.ndarray, prefill: float, rng):
    """Token arrival times for one decode stream; a token due inside a prefill waits for it."""
    times, t = [], start
    for _ in range(count):
        t += itl * rng.uniform(0.85, 1.15)
        inside = stalls[(stalls <= t) & (t < stalls + prefill)]
        if inside.size:
            t = float(inside.max() + prefill)
        times.append(t)
    return times


def generate(shape: RunShape) -> tuple[list[RequestRecord], list[ChunkEvent]]:
    rng = np.random.default_rng(shape.seed)
    long_sends = np.sort(rng.uniform(2.0, shape.duration_s - 3.0, shape.long_prompts))
    records: list[RequestRecord] = []
    chunks: list[ChunkEvent] = []
    for i, sent in enumerate(long_sends):
        rid = f"long-{i}"
        first = float(sent + shape.prefill_s)
        records.append(
            RequestRecord(
                id=rid,
                kind="long-prompt",
                intended_s=float(sent),
                sent_s=float(sent),
                first_token_s=first,
                end_s=first + 0.1,
                prompt_tokens=8192,
                output_tokens=4,
                cached_tokens=0,
                expected_cached_tokens=0,
            )
        )
        chunks += [ChunkEvent(rid, first + 0.025 * k, 1) for k in range(4)]
    arrivals = np.sort(rng.uniform(0, shape.duration_s - 2.0, shape.decodes))
    for i, intended in enumerate(arrivals):
        rid = f"dec-{i}"
        sent = float(intended + rng.uniform(0, 0.002))
        cached = int(rng.choice([0, 64, 128, 256]))
        first = sent + 0.02 + 0.0001 * (512 - cached) + rng.gamma(2.0, 0.01)
        behind = long_sends[(long_sends <= first) & (first < long_sends + shape.prefill_s)]
        if behind.size:  # queued behind a long prefill
            first = float(behind.max() + shape.prefill_s + rng.uniform(0, 0.02))
        times = _token_times(first, 63, shape.itl_s, long_sends, shape.prefill_s, rng)
        chunks.append(ChunkEvent(rid, first, 1))
        # Every tenth token arrives bundled with the next one (a two-token chunk).
        chunks += [
            ChunkEvent(rid, t, 2 if k % 10 == 9 else 1) for k, t in enumerate(times) if k % 10 != 8
        ]
        records.append(
            RequestRecord(
                id=rid,
                kind="decode",
                intended_s=float(intended),
                sent_s=sent,
                first_token_s=first,
                end_s=times[-1],
                prompt_tokens=512,
                output_tokens=64,
                cached_tokens=cached,
                expected_cached_tokens=cached,
            )
        )
    for i in range(shape.failures):
        t = float(rng.uniform(0, shape.duration_s))
        records.append(
            RequestRecord(
                id=f"err-{i}",
                kind="decode",
                intended_s=t,
                sent_s=t,
                end_s=t + 0.01,
                prompt_tokens=512,
                status=Status.ERROR,
                error_kind=ErrorKind.HTTP_5XX,
                http_status=503,
                error_message=f"{shape.error_message} #{i}",
            )
        )
    return records, chunks


def pool_samples(shape: RunShape, total_blocks: int = 4000) -> list[dict[str, Any]]:
    """Raw /metrics samples in long format, as the scraper stores them."""
    rows: list[dict[str, Any]] = []
    for t in np.arange(0.0, shape.duration_s, 0.5):
        active = int(800 + 600 * np.sin(t / 4) ** 2)
        reclaimable = int(min(300 + 60 * t, total_blocks - active))
        free = total_blocks - active - reclaimable
        if shape.pool == "embedded":
            for state, value in (("active", active), ("reclaimable", reclaimable), ("free", free)):
                rows.append(
                    {
                        "t_s": float(t),
                        "metric": "prefillscope_engine_kv_blocks",
                        "labels": json.dumps({"state": state}),
                        "value": float(value),
                    }
                )
        elif shape.pool == "vllm":
            rows.append(
                {
                    "t_s": float(t),
                    "metric": "vllm:kv_cache_usage_perc",
                    "labels": json.dumps({"model_name": shape.model}),
                    "value": active / total_blocks,
                }
            )
            rows.append(
                {
                    "t_s": float(t),
                    "metric": "vllm:cache_config_info",
                    "labels": json.dumps({"block_size": "16", "num_gpu_blocks": str(total_blocks)}),
                    "value": 1.0,
                }
            )
    return rows


def diagnosis_doc(run_dir: Path, hostile: str) -> dict[str, Any]:
    """A diagnosis in the DIAGNOSIS_JSON shape (as ``diagnose`` will write it)."""
    return {
        "run": str(run_dir),
        "decision": {
            "hard_failure": True,
            "reasons": ["ITL p99 0.410 s breaches the SLO itl<=0.05 s"],
            "recommendation": "Contain now: lower max_num_batched_tokens to 512, then run the A/B.",
        },
        "hypotheses": [
            {
                "id": "H1",
                "title": "Prefill chunks starving decodes",
                "status": "supported",
                "summary": "Gaps overlapping a prefill are 18x longer.",
                "evidence": [
                    {
                        "name": "overlap/non-overlap ITL ratio",
                        "value": 18.2,
                        "unit": "x",
                        "source": "client: chunks",
                        "detail": hostile,
                    }
                ],
                "missing": ["step kinds"],
                "next": "prefillscope diagnose ab --chunks 512,2048",
            },
            {
                "id": "H2",
                "title": "Host/scheduler overhead",
                "status": "not supported",
                "summary": "ITL floor matches the roofline.",
                "evidence": [],
                "missing": [],
                "next": "",
            },
            {
                "id": "H3",
                "title": "HBM-bandwidth-bound decode",
                "status": "inconclusive",
                "summary": "No --gpu given.",
                "evidence": [],
                "missing": ["--gpu"],
                "next": "--gpu",
            },
            {
                "id": "H4",
                "title": "KV pool exhaustion vs reservation",
                "status": "weakened",
                "summary": "Pool mostly reclaimable.",
                "evidence": [],
                "missing": [],
                "next": "",
            },
        ],
        "prefix_cache": {
            "id": "PC",
            "title": "Prefix-cache health",
            "status": "as expected",
            "summary": "Observed equals the oracle.",
            "evidence": [],
            "missing": [],
            "next": "",
        },
    }


def build_run(path: Path, shape: RunShape | None = None) -> Path:
    """Write a complete run directory at ``path`` and return it."""
    shape = shape or RunShape()
    records, chunks = generate(shape)
    info = {
        "tool_version": "0.1.0",
        "command": ["prefillscope", "bench", "--workload", "interference"],
        "target": {"url": "http://127.0.0.1:8000", "flavour": "vllm", "model": shape.model},
        "workload": {"workload": "interference", "seed": shape.seed},
        "clock": {"wall_t0": 1_790_000_000.0},
        "status": shape.status,
    }
    samples = pool_samples(shape) if shape.pool else None
    run = RunDir(write_run(path, records, chunks, info, samples))
    if shape.summary:
        requests = run.read_table("requests")
        summary = summarize_frames(requests, run.read_table("chunks"), pd.DataFrame())
        summary["server"] = server_summary(server_series(run), requests)
        run.write_json("summary.json", summary)
    if shape.diagnosis:
        run.write_json("diagnosis.json", diagnosis_doc(path, shape.error_message))
    return path


def build_large_run(path: Path, requests: int, tokens_per_request: int = 20, seed: int = 1) -> Path:
    """A run of many requests written straight to parquet (the journal is for crash safety,
    not for generating 10^6 rows quickly)."""
    rng = np.random.default_rng(seed)
    sent = np.sort(rng.uniform(0, 3600, requests))
    first = sent + rng.gamma(2.0, 0.05, requests)
    gaps = rng.lognormal(np.log(0.02), 0.4, (requests, tokens_per_request))
    times = first[:, None] + np.cumsum(gaps, axis=1)
    ids = np.array([f"r{i}" for i in range(requests)], dtype=object)
    kinds = np.where(rng.random(requests) < 0.02, "long-prompt", "decode")
    prompt = np.where(kinds == "long-prompt", 16384, 512)
    run = RunDir(path, create=True)
    run.write_json("run.json", {"status": "complete", "workload": {"workload": "scale"}})
    pd.DataFrame(
        {
            "id": ids,
            "kind": kinds,
            "intended_s": sent,
            "sent_s": sent,
            "first_token_s": first,
            "end_s": times[:, -1],
            "prompt_tokens": prompt,
            "output_tokens": tokens_per_request + 1,
            "cached_tokens": rng.integers(0, 512, requests),
            "expected_cached_tokens": None,
            "status": "ok",
            "warmup": False,
        }
    ).to_parquet(path / "requests.parquet", index=False)
    pd.DataFrame(
        {
            "request_id": np.repeat(ids, tokens_per_request + 1),
            "t_s": np.c_[first, times].ravel(),
            "n_tokens": 1,
        }
    ).to_parquet(path / "chunks.parquet", index=False)
    t = np.arange(0, 3600, 5.0)  # sparse scrapes: this run is about request volume
    pool = pd.DataFrame(
        {
            "t_s": np.repeat(t, 3),
            "metric": "prefillscope_engine_kv_blocks",
            "labels": np.tile(
                [json.dumps({"state": s}) for s in ("active", "reclaimable", "free")], t.size
            ),
            "value": np.tile([1000.0, 500.0, 2500.0], t.size),
        }
    )
    pool.to_parquet(path / "server_metrics.parquet", index=False)
    return path
