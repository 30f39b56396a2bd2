"""The tests' one fabricator of run directories, written through the run format.

``write_run`` puts a run where ``bench`` puts it, by the same writers: ``run.json`` as a
``RunInfo``, the tables through ``RunDir``'s journals (compacted to parquet on close),
``summary.json`` as a ``Summary`` and ``diagnosis.json`` as a ``Diagnosis``, so the
readers under test see the real format at its current version. The builders below make
whole runs from the shapes in ``run_shapes``: ``synth_run`` (log-normal latencies, for
statistics and ``compare``), ``plan_run`` (a real workload plan with its oracle),
``report_run`` (the interference model, summarised and diagnosed, for the report) and
``large_run`` (10^5–10^6 requests, for the report's scale).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from run_shapes import (
    RunShape,
    interference,
    lognormal_streams,
    planted_diagnosis,
    pool_samples,
)

from loadgen.records import ChunkEvent, RequestRecord
from probes.latency import summarize_frames
from probes.server_summary import server_summary
from probes.timeline import server_series
from runfmt.diagnosis import Diagnosis
from runfmt.names import (
    CHUNKS_TABLE,
    DIAGNOSIS_JSON,
    REQUESTS_TABLE,
    RUN_JSON,
    SERVER_METRICS_TABLE,
    SUMMARY_JSON,
)
from runfmt.rundir import RunDir
from runfmt.runinfo import RunInfo
from runfmt.summary import Summary
from runfmt.tables import RunTables
from workloads.build import build_plan
from workloads.oracle import annotate
from workloads.spec import load_spec

#: The workload ``synth_run``'s runs say they ran (``compare`` refuses different ones).
WORKLOAD = {"name": "system-prompt", "groups": 4, "prefix_tokens": 1024}


def write_run(
    path: Path,
    records: Iterable[RequestRecord | Mapping[str, Any]] = (),
    chunks: Iterable[ChunkEvent] = (),
    info: Mapping[str, Any] | None = None,
    samples: list[dict[str, Any]] | None = None,
    *,
    tables: Mapping[str, list[dict[str, Any]]] | None = None,
    summary: Mapping[str, Any] | None = None,
    diagnosis: Diagnosis | None = None,
) -> Path:
    """A closed run directory at ``path`` holding ``records`` (records or request rows),
    ``chunks``, server ``samples`` and other ``tables`` by name; ``run.json`` says
    ``info`` (its keys as ``run.json`` spells them; ``status`` complete unless given);
    ``summary`` (its sections) and ``diagnosis`` are written when given."""
    run = RunDir(path, create=True)
    run.write_json(RUN_JSON, run_info(info).to_json())
    rows = [r.to_row() if isinstance(r, RequestRecord) else dict(r) for r in records]
    run.table(REQUESTS_TABLE).append_many(rows)
    run.table(CHUNKS_TABLE).append_many([asdict(c) for c in chunks])
    for name, table_rows in {SERVER_METRICS_TABLE: samples or [], **(tables or {})}.items():
        if table_rows:
            run.table(name).append_many(table_rows)
    run.close()
    if summary is not None:
        write_summary(path, summary)
    if diagnosis is not None:
        run.write_json(DIAGNOSIS_JSON, diagnosis.to_json())
    return path


def run_info(info: Mapping[str, Any] | None = None) -> RunInfo:
    """The ``RunInfo`` of a finished run that says ``info`` (``run.json``'s own keys)."""
    return RunInfo.from_json({"status": "complete", **(info or {})})


def write_summary(path: Path, summary: Summary | Mapping[str, Any]) -> None:
    """``summary.json`` of the run at ``path``: ``summary``, or a document's ``sections``
    (JSON, as a file of any version holds them) read as a ``Summary``."""
    typed = summary if isinstance(summary, Summary) else Summary.from_json(summary)
    RunDir(path).write_json(SUMMARY_JSON, typed.to_json())


def computed_summary(path: Path) -> Summary:
    """The summary ``bench`` computes from the run's tables: the client's and the server's."""
    run = RunDir(path)
    requests = RunTables(run).requests
    summary = summarize_frames(requests, RunTables(run).chunks, pd.DataFrame())
    return replace(summary, server=server_summary(server_series(run), requests))


def synth_run(
    path: Path, *, seed: int = 0, workload: Mapping[str, Any] | None = None, **shape: Any
) -> Path:
    """A complete run of ``run_shapes.lognormal_streams(seed=seed, **shape)``, saying it
    ran ``workload`` (``WORKLOAD``) with ``seed``."""
    records, chunks = lognormal_streams(seed=seed, **shape)
    return write_run(path, records, chunks, {"workload": {**(workload or WORKLOAD), "seed": seed}})


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


def report_run(path: Path, shape: RunShape | None = None) -> Path:
    """A run of the interference model (``run_shapes.interference``) against a vLLM-like
    target, with its pool samples, and the summary and diagnosis ``shape`` asks for."""
    shape = shape or RunShape()
    records, chunks = interference(shape)
    info = {
        "tool_version": "0.1.0",
        "command": ["prefillscope", "bench", "--workload", "interference"],
        "target": {"url": "http://127.0.0.1:8000", "flavour": "vllm", "model": shape.model},
        "workload": {"workload": "interference", "seed": shape.seed},
        "clock": {"wall_t0": 1_790_000_000.0},
        "status": shape.status,
    }
    samples = pool_samples(shape) if shape.pool else None
    write_run(path, records, chunks, info, samples)
    if shape.summary:
        write_summary(path, computed_summary(path))
    if shape.diagnosis:
        RunDir(path).write_json(
            DIAGNOSIS_JSON, planted_diagnosis(path, shape.error_message).to_json()
        )
    return path


def large_run(path: Path, requests: int, tokens_per_request: int = 20, seed: int = 1) -> Path:
    """A run of many requests whose tables are written as the parquet files a closed run
    holds, without their journals (the journal is for crash safety, not for writing 10^6
    rows quickly): the readers read parquet first, so they see a run like any other."""
    rng = np.random.default_rng(seed)
    sent = np.sort(rng.uniform(0, 3600, requests))
    first = sent + rng.gamma(2.0, 0.05, requests)
    gaps = rng.lognormal(np.log(0.02), 0.4, (requests, tokens_per_request))
    times = first[:, None] + np.cumsum(gaps, axis=1)
    ids = np.array([f"r{i}" for i in range(requests)], dtype=object)
    kinds = np.where(rng.random(requests) < 0.02, "long-prompt", "decode")
    prompt = np.where(kinds == "long-prompt", 16384, 512)
    run = RunDir(path, create=True)
    run.write_json(RUN_JSON, run_info({"workload": {"workload": "scale"}}).to_json())
    tables = {
        REQUESTS_TABLE: {
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
        },
        CHUNKS_TABLE: {
            "request_id": np.repeat(ids, tokens_per_request + 1),
            "t_s": np.c_[first, times].ravel(),
            "n_tokens": 1,
        },
    }
    t = np.arange(0, 3600, 5.0)  # sparse scrapes: this run is about request volume
    states = [json.dumps({"state": s}) for s in ("active", "reclaimable", "free")]
    tables[SERVER_METRICS_TABLE] = {
        "t_s": np.repeat(t, 3),
        "metric": "prefillscope_engine_kv_blocks",
        "labels": np.tile(states, t.size),
        "value": np.tile([1000.0, 500.0, 2500.0], t.size),
    }
    for name, columns in tables.items():
        pd.DataFrame(columns).to_parquet(path / f"{name}.parquet", index=False)
    return path
