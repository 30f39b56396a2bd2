"""Percentiles a user picks, as ``vllm bench serve``'s ``--percentile-metrics`` and
``--metric-percentiles`` pick them: any of ``ttft``, ``tpot``, ``itl``, ``e2el``,
``client_queue_time`` and ``e2el_including_client_queue`` at any percentiles, over the
run's completed measured requests (ITL per token, as everywhere).

Each name keeps vLLM's meaning: ``ttft`` and ``e2el`` are timed from the actual send
(``ttft_sent_s``, ``e2e_sent_s``), ``client_queue_time`` is the wait for a
``--max-concurrency`` slot (``concurrency_wait_s``) and ``e2el_including_client_queue``
is E2E from the intended send (``e2e_s``). The summary keys them by that column.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.quantiles import finite, quantile
from workloads.errors import InputError

#: vLLM's metric names → the column (or ``itl`` gaps) they are read from.
METRICS = {
    "ttft": "ttft_sent_s",
    "tpot": "tpot_s",
    "itl": "itl_s",
    "e2el": "e2e_sent_s",
    "client_queue_time": "concurrency_wait_s",
    "e2el_including_client_queue": "e2e_s",
}


def parse_metrics(text: str) -> tuple[str, ...]:
    names = tuple(n.strip().lower() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in METRICS]
    if bad or not names:
        raise InputError(
            "--percentile-metrics",
            f"unknown metric {bad[0] if bad else text!r}",
            f"known: {', '.join(METRICS)}",
        )
    return names


def parse_percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(
            "--metric-percentiles", f"{text!r} is not numbers", "e.g. 50,90,99"
        ) from None
    if not values or any(not 0 < v <= 100 for v in values):
        raise InputError(
            "--metric-percentiles", f"{text!r}: each must be in (0, 100]", "e.g. 50,90,99"
        )
    return values


def label(percentile: float) -> str:
    """``p99``, ``p99.9``: the summary key of a percentile."""
    return f"p{percentile:g}"


def picked_percentiles(
    requests: Any, chunks: Any, metrics: tuple[str, ...], percentiles: tuple[float, ...]
) -> dict[str, dict[str, float | None]]:
    """``{metric column: {"p99": seconds, …}}`` for the completed measured requests."""

    from probes.latency import completed_mask, latency_columns, measured
    from probes.token_gaps import token_chunks, token_gaps

    runs = measured(requests)
    ok = completed_mask(runs)
    latencies = latency_columns(runs)
    out: dict[str, dict[str, float | None]] = {}
    for name in metrics:
        column = METRICS[name]
        if column == "itl_s":
            done = np.asarray(runs["id"])[ok] if "id" in runs else None
            values = finite(token_gaps(token_chunks(chunks, done)).gap_s)
        else:
            values = finite(latencies[column][ok])
        out[column] = {
            label(p): (quantile(values, p / 100) if values.size else None) for p in percentiles
        }
    return out
