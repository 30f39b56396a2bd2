"""What fabricated runs hold: request records, chunk events, server samples and diagnoses,
as plain data. ``rundirs`` writes them into run directories through the run format.

* ``streamed``: one request's record and chunk events from the times its chunks arrived;
* ``steady_streams``: decode streams that tick at a fixed step;
* ``lognormal_streams``: open-loop requests whose latencies are drawn from seeded
  log-normal distributions around given medians (a planted change of a median is a
  planted regression), for the statistics and ``compare`` tests;
* ``interference``: a small interference model for the report tests. Decode streams tick
  at a steady inter-token latency; long prompts arrive now and then and, for the length of
  their prefill, stall every decode token that falls inside it (the pattern the report's
  ITL-over-time plot exists to show); ``pool_samples`` is its KV pool as scraped;
* ``scrape_rows``/``metric_row``: server samples in the scraper's long format, from a real
  exposition (a vLLM capture) or one value at a time;
* ``planted_diagnosis``: a diagnosis as ``diagnose`` types it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.records import ChunkEvent, ErrorKind, RequestRecord, Status
from probes.exposition import parse_exposition
from probes.scraper import sample_rows
from runfmt.diagnosis import CacheHealth, Decision, Diagnosis, Evidence, Finding
from runfmt.diagnosis import Status as Verdict

#: A detail no page may show unescaped.
HOSTILE = "<script>alert(1)</script>"

Streams = tuple[list[RequestRecord], list[ChunkEvent]]


def streamed(
    rid: str, sent_s: float, times: Any, sizes: list[int] | None = None, **fields: Any
) -> tuple[RequestRecord, list[ChunkEvent]]:
    """One request sent (as intended) at ``sent_s`` whose streamed chunks arrive at
    ``times``, ``sizes`` tokens each (one token a chunk when not given): its record, its
    first token and end at the first and last chunk, and its chunk events."""
    sizes = [1] * len(times) if sizes is None else sizes
    chunks = [ChunkEvent(rid, float(t), n) for t, n in zip(times, sizes, strict=True)]
    first, end = float(times[0]), float(times[-1])
    record = RequestRecord(
        id=rid, intended_s=sent_s, sent_s=sent_s, first_token_s=first, end_s=end, **fields
    )
    return record, chunks


def steady_streams(
    streams: int,
    tokens: int,
    step_s: float,
    *,
    prompt_tokens: int = 100,
    start_s: float = 0.0,
    prefix: str = "s",
    **fields: Any,
) -> Streams:
    """``streams`` requests decoding side by side, one token per ``step_s`` each."""
    records, chunks = [], []
    for i in range(streams):
        times = start_s + 0.05 + step_s * np.arange(tokens)
        record, events = streamed(
            f"{prefix}{i}",
            start_s,
            times,
            prompt_tokens=prompt_tokens,
            output_tokens=tokens,
            **fields,
        )
        records.append(record)
        chunks += events
    return records, chunks


def lognormal_streams(
    *,
    requests: int = 200,
    seed: int = 0,
    rate: float = 20.0,
    ttft_s: float = 0.05,
    itl_s: float = 0.01,
    output_tokens: int = 32,
    tokens_per_chunk: int = 1,
    spread: float = 0.25,
) -> Streams:
    """``requests`` open-loop requests at ``rate`` per second, TTFT and ITL log-normal
    around ``ttft_s`` and ``itl_s``, ``tokens_per_chunk`` tokens to a streamed chunk."""
    rng = np.random.default_rng(seed)
    records: list[RequestRecord] = []
    chunks: list[ChunkEvent] = []
    chunk_count = -(-(output_tokens - 1) // tokens_per_chunk)
    for i in range(requests):
        intended = i / rate
        first = intended + ttft_s * rng.lognormal(0.0, spread)
        sizes = [tokens_per_chunk] * chunk_count
        sizes[-1] = output_tokens - 1 - tokens_per_chunk * (chunk_count - 1)
        gaps = itl_s * np.asarray(sizes) * rng.lognormal(0.0, spread, size=chunk_count)
        times = first + np.concatenate([[0.0], np.cumsum(gaps)])
        record, events = streamed(
            f"r{i}",
            intended,
            times,
            [1, *sizes],
            prompt_tokens=1100,
            output_tokens=output_tokens,
            cached_tokens=1024,
            expected_cached_tokens=1024,
            num_chunks=chunk_count + 1,
            multi_token_chunks=sum(n > 1 for n in sizes),
        )
        records.append(record)
        chunks += events
    return records, chunks


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


def interference(shape: RunShape) -> Streams:
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


def scrape_rows(text: str, t_s: float) -> list[dict[str, Any]]:
    """A real exposition as the scraper journals it at ``t_s``."""
    return sample_rows(t_s, parse_exposition(text))


def metric_row(t_s: float, metric: str, value: float, **labels: str) -> dict[str, Any]:
    return {"t_s": t_s, "metric": metric, "labels": json.dumps(labels), "value": value}


def planted_diagnosis(run_dir: Path, detail: str) -> Diagnosis:
    """A diagnosis with every status a reader meets: H1 supported (its evidence carrying
    ``detail``), H2 not supported, H3 inconclusive, H4 weakened, the prefix cache fine."""
    h1 = Finding(
        "H1",
        "Prefill chunks starving decodes",
        Verdict.SUPPORTED,
        "Gaps overlapping a prefill are 18x longer.",
        evidence=[Evidence("overlap/non-overlap ITL ratio", 18.2, "x", "client: chunks", detail)],
        missing=["step kinds"],
        next="prefillscope diagnose ab --chunks 512,2048",
    )
    h2 = Finding(
        "H2", "Host/scheduler overhead", Verdict.NOT_SUPPORTED, "ITL floor matches the roofline."
    )
    h3 = Finding(
        "H3",
        "HBM-bandwidth-bound decode",
        Verdict.INCONCLUSIVE,
        "No --gpu given.",
        missing=["--gpu"],
        next="--gpu",
    )
    h4 = Finding(
        "H4", "KV pool exhaustion vs reservation", Verdict.WEAKENED, "Pool mostly reclaimable."
    )
    return Diagnosis(
        run=str(run_dir),
        decision=Decision(
            hard_failure=True,
            reasons=["ITL p99 0.410 s breaches the SLO itl<=0.05 s"],
            recommendation="Contain now: lower max_num_batched_tokens to 512, then run the A/B.",
        ),
        hypotheses=[h1, h2, h3, h4],
        prefix_cache=Finding(
            "PC", "Prefix-cache health", CacheHealth.AS_EXPECTED, "Observed equals the oracle."
        ),
    )
