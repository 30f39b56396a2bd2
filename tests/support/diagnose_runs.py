"""Run directories for the diagnosis unit tests, written through the real ``RunDir``.

``write_run`` puts records, chunk events, raw server samples and ``run.json`` where
``bench`` puts them; ``steady_streams`` makes decode streams that tick at a fixed step;
``scrape_rows`` turns a real /metrics exposition into the scraper's long-format rows,
so a run can carry what a real server (a vLLM capture) said; ``plan_run`` writes the
requests of a real workload plan, as the prefix-cache checks need.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.records import ChunkEvent, RequestRecord
from probes.exposition import parse_exposition
from probes.scraper import sample_rows
from runfmt.rundir import RunDir
from workloads.build import build_plan
from workloads.oracle import annotate
from workloads.spec import load_spec


def write_run(
    path: Path,
    records: list[RequestRecord],
    chunks: list[ChunkEvent],
    info: dict[str, Any] | None = None,
    samples: list[dict[str, Any]] | None = None,
) -> Path:
    run = RunDir(path, create=True)
    run.write_json("run.json", {"status": "complete", **(info or {})})
    run.table("requests").append_many([r.to_row() for r in records])
    run.table("chunks").append_many([asdict(c) for c in chunks])
    if samples:
        run.table("server_metrics").append_many(samples)
    run.close()
    return path


def steady_streams(
    streams: int,
    tokens: int,
    step_s: float,
    *,
    prompt_tokens: int = 100,
    start_s: float = 0.0,
    prefix: str = "s",
    **fields: Any,
) -> tuple[list[RequestRecord], list[ChunkEvent]]:
    """``streams`` requests decoding side by side, one token per ``step_s`` each."""
    records, chunks = [], []
    for i in range(streams):
        rid = f"{prefix}{i}"
        first = start_s + 0.05
        times = first + step_s * np.arange(tokens)
        chunks += [ChunkEvent(rid, float(t), 1) for t in times]
        records.append(
            RequestRecord(
                id=rid,
                intended_s=start_s,
                sent_s=start_s,
                first_token_s=float(times[0]),
                end_s=float(times[-1]),
                prompt_tokens=prompt_tokens,
                output_tokens=tokens,
                **fields,
            )
        )
    return records, chunks


def scrape_rows(text: str, t_s: float) -> list[dict[str, Any]]:
    """A real exposition as the scraper journals it at ``t_s``."""
    return sample_rows(t_s, parse_exposition(text))


def metric_row(t_s: float, metric: str, value: float, **labels: str) -> dict[str, Any]:
    return {"t_s": t_s, "metric": metric, "labels": json.dumps(labels), "value": value}


def plan_run(
    path: Path,
    workload: str,
    overrides: dict[str, Any],
    *,
    observed: str = "expected",
    num_blocks: int | None = None,
    samples: list[dict[str, Any]] | None = None,
    flavour: str | None = None,
) -> Path:
    """A run of a real plan (``run.json`` holds its spec, so it can be rebuilt), every
    request annotated by the oracle for a pool of ``num_blocks`` (None: unbounded).

    ``observed`` is what the server "reported": ``expected`` (the oracle's figure),
    ``zero``, or ``none`` (no ``cached_tokens`` at all).
    """
    spec = load_spec(workload, overrides)
    plan = annotate(build_plan(spec), 16, num_blocks, 32000, "m")
    records, chunks = [], []
    for i, r in enumerate(plan.requests):
        sent = 0.1 * i
        cached = {"expected": r.expected_cached_tokens, "zero": 0, "none": None}[observed]
        records.append(
            RequestRecord(
                id=r.id,
                kind=r.kind,
                group=r.group,
                tenant=r.tenant,
                lora=r.lora,
                warmup=r.warmup,
                intended_s=sent,
                sent_s=sent,
                first_token_s=sent + 0.02,
                end_s=sent + 0.06,
                prompt_tokens=r.prompt_len,
                output_tokens=3,
                cached_tokens=cached,
                expected_cached_tokens=r.expected_cached_tokens,
            )
        )
        chunks += [ChunkEvent(r.id, sent + 0.02 * k, 1) for k in (1, 2, 3)]
    info = {
        "workload": spec.to_dict(),
        "target": {"model": "m", "vocab_size": 32000},
        "oracle": {"block_size": 16, "num_blocks": num_blocks},
        "probes": {"server_metrics": {"flavour": flavour}} if flavour else {},
    }
    return write_run(path, records, chunks, info, samples)
