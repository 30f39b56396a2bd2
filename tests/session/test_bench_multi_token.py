"""Multi-token chunks: the embedded engine streaming 4 tokens per event.

With ``--engine stream_interval=4`` the engine (a fixed 10 ms step, one token per step)
sends the first token at once and then one event per 4 tokens, every 40 ms. ITL per
chunk would read 40 ms; per token — a chunk of n tokens after a gap g counts n gaps of
g/n — it is the step the engine really took, 10 ms, which its own histogram (observed
every step) also says. The share of multi-token chunks is reported.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from bench_support import bench, histogram_delta

from runfmt.tables import RunTables

STEP_S = 0.01


def test_per_token_itl_is_the_engine_step_and_multi_token_chunks_are_counted(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    outcome = bench(
        "shared-prefix",
        run,
        engine=("stream_interval=4", f"fixed_step_s={STEP_S}"),
        overrides={"output_len": 33, "num_requests": 24, "rate": 8, "groups": 2},
    )
    assert outcome.status == "complete"
    summary = outcome.summary.to_json()
    itl = summary["itl_s"]
    assert itl["count"] == 24 * 32
    # The mean against the engine's own step interval (its ITL histogram, observed every
    # step); the median against the step it was told to take (on a busy machine some
    # real-time steps run late, which both sides then see).
    engine_sum, engine_count = histogram_delta(run, "vllm:inter_token_latency_seconds")
    assert engine_count == 24 * 32
    assert abs(itl["mean"] / (engine_sum / engine_count) - 1) < 0.02
    assert abs(itl["p50"] / STEP_S - 1) < 0.02, itl

    chunks = summary["chunks"]
    assert chunks["tokens"] == 24 * 33
    assert chunks["multi_token"] >= 24 * 7  # 8 four-token events per request (reads may merge)
    assert chunks["multi_token_share"] > 0.8

    # Per chunk, the gap is four steps: what per-chunk ITL would have reported.
    table = RunTables(run).chunks.sort_values(["request_id", "t_s"])
    same = table["request_id"].to_numpy()[1:] == table["request_id"].to_numpy()[:-1]
    per_chunk = np.diff(table["t_s"].to_numpy())[same]
    assert abs(np.median(per_chunk) / (4 * STEP_S) - 1) < 0.05
