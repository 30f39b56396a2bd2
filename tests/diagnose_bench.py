"""Real bench runs for the diagnosis's integration tests: the embedded engine over loopback.

``bench`` is ``prefillscope bench`` in-process (``run_bench``): the engine is started on a
free port with the planted configuration (``--engine KEY=VALUE``), its ``/metrics`` are
scraped every 0.1 s, and the run directory is exactly what the command writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefillscope.bench_runner import BenchOptions, run_bench
from prefillscope.engine_flags import parse_engine_flags

#: The interference pattern the chunk-size hypothesis is about, sized to run in ~2 s:
#: four decode streams of 200 tokens, three 8192-token prompts dropped into them.
INTERFERENCE = {
    "num_requests": 3,
    "rate": 2,
    "concurrency": 4,
    "seed": 3,
    "stream_requests": 1,
    "stream_output_len": 200,
    "long_prompt_len": 8192,
}


def bench(
    out: Path,
    workload: str,
    overrides: dict[str, Any],
    engine: Sequence[str] = (),
    **options: Any,
) -> Path:
    """Run one bench against the embedded engine (or ``endpoint=``) and return its folder."""
    settings = parse_engine_flags(engine) if engine else None
    outcome = asyncio.run(
        run_bench(
            BenchOptions(
                workload,
                dict(overrides),
                engine=settings,
                out=out,
                gpu="off",
                metrics_interval_s=0.1,
                **options,
            )
        )
    )
    return outcome.run_dir
