"""Run directories built from generated records, for the statistics and compare tests.

The records are the real ``RequestRecord``/``ChunkEvent`` rows written through the real
``RunDir`` journal (and compacted to parquet), so the readers under test see exactly
what ``bench`` writes. Latencies are drawn from seeded log-normal distributions around
the given medians, so a planted change of a median is a planted regression.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from diagnose_runs import write_run

from loadgen.records import ChunkEvent, RequestRecord
from runfmt.rundir import RunDir

WORKLOAD = {"name": "system-prompt", "groups": 4, "prefix_tokens": 1024}


def synth_run(
    path: Path,
    *,
    requests: int = 200,
    seed: int = 0,
    rate: float = 20.0,
    ttft_s: float = 0.05,
    itl_s: float = 0.01,
    output_tokens: int = 32,
    tokens_per_chunk: int = 1,
    spread: float = 0.25,
    workload: dict | None = None,
) -> RunDir:
    """Write a complete run of ``requests`` open-loop requests at ``rate`` per second."""
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
        rid = f"r{i}"
        chunks += [ChunkEvent(rid, float(t), n) for t, n in zip(times, [1, *sizes], strict=True)]
        records.append(
            RequestRecord(
                id=rid,
                intended_s=intended,
                sent_s=intended,
                first_token_s=float(times[0]),
                end_s=float(times[-1]),
                prompt_tokens=1100,
                output_tokens=output_tokens,
                cached_tokens=1024,
                expected_cached_tokens=1024,
                num_chunks=chunk_count + 1,
                multi_token_chunks=sum(n > 1 for n in sizes),
            )
        )
    info = {"workload": {**(workload or WORKLOAD), "seed": seed}}
    return RunDir(write_run(path, records, chunks, info))
