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

from typing import TYPE_CHECKING

import numpy as np

from runfmt.columns import IdSet
from runfmt.metrics import E2E, E2E_SENT, ITL, TPOT, TTFT_SENT
from runtime.quantiles import QUANTILES, select_passes
from workloads.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from probes.latency import Parts
    from runfmt.columns import Table
    from runtime.quantiles import Selection

#: vLLM's metric names → the column (or ``itl`` gaps) they are read from, in the order
#: vLLM writes their statistics.
METRICS = {
    "ttft": TTFT_SENT.key,
    "tpot": TPOT.key,
    "itl": ITL.key,
    "e2el": E2E_SENT.key,
    "client_queue_time": "concurrency_wait_s",
    "e2el_including_client_queue": E2E.key,
}

#: vLLM's defaults: ``--percentile-metrics ttft,tpot,itl`` and ``--metric-percentiles 99``.
DEFAULT_METRICS = ("ttft", "tpot", "itl")
DEFAULT_PERCENTILES = (99.0,)


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


#: The name prefix of a picked percentile's value stream beside the summary's own (the
#: same values may be asked at other levels: ``runtime.quantiles.select_passes``).
PICKED = "picked:"
#: What ``--percentile-metrics`` and ``--metric-percentiles`` ask for.
Picked = tuple[tuple[str, ...], tuple[float, ...]]


def picked_levels(percentiles: tuple[float, ...]) -> dict[str, float]:
    """The picked percentiles by their summary key (``p99``: 99.0)."""
    return {label(p): p for p in percentiles}


def levels_of(picked: Picked | None) -> Callable[[str], dict[str, float]]:
    """``select_passes``' levels by stream name: the picked percentiles for a picked
    stream, the summary's own quantiles for any other."""
    levels = picked_levels(picked[1]) if picked else {}
    return lambda name: levels if name.startswith(PICKED) else QUANTILES


def picked_values(
    picked: Picked | None, runs: Table, ok: np.ndarray, latencies: Table
) -> dict[str, np.ndarray]:
    """One part's picked request streams (every picked metric but ``itl``): the completed
    measured requests' values of each column, by ``PICKED`` + column."""
    if picked is None:
        return {}
    columns = dict.fromkeys(METRICS[name] for name in picked[0])
    return {PICKED + c: np.asarray(latencies[c])[ok] for c in columns if c != ITL.key}


def picks_itl(picked: Picked | None) -> bool:
    return picked is not None and "itl" in picked[0]


def picked_section(
    picked: Picked, selections: Mapping[str, Selection]
) -> dict[str, dict[str, float | None]]:
    """``{metric column: {"p99": seconds, …}}`` from the finished picked streams (none
    where no value was seen)."""
    levels = picked_levels(picked[1])
    out: dict[str, dict[str, float | None]] = {}
    for name in picked[0]:
        column = METRICS[name]
        selection = selections.get(PICKED + column)
        counted = selection is not None and selection.count > 0
        out[column] = {key: selection.value(key) if counted else None for key in levels}
    return out


def picked_percentiles(
    requests: Table | Parts,
    chunks: Table | Parts,
    metrics: tuple[str, ...],
    percentiles: tuple[float, ...],
) -> dict[str, dict[str, float | None]]:
    """``{metric column: {"p99": seconds, …}}`` for the completed measured requests. The
    tables whole or a part at a time (``probes.latency.Parts``), the quantiles exact either
    way (``runtime.quantiles.select_passes``: a pass over the parts per narrowing, the
    completed requests' ids held as bytes to pick their chunks), never a long run's column
    or ITL gaps whole. A bench's summary takes the same streams in its own passes
    (``probes.latency.summarize_frames``' ``picked``)."""
    from probes.latency import completed_mask, latency_columns, measured, parts_of
    from probes.token_gaps import chunk_gaps, token_chunk_parts

    requests, chunks = parts_of(requests), parts_of(chunks)
    picked = (metrics, percentiles)
    done: list[np.ndarray] = []
    every_id = True  # a table without ids: the ITL reads every request's chunks

    def request_values(pass_number: int) -> Iterator[dict[str, np.ndarray]]:
        nonlocal every_id
        for part in requests():
            runs = measured(part)
            ok = completed_mask(runs)
            if pass_number == 0:
                every_id = every_id and "id" in runs
                done.append(np.asarray(runs.get("id", []), dtype=object)[ok] if every_id else [])
            yield picked_values(picked, runs, ok, latency_columns(runs))

    found = select_passes(request_values, levels_of(picked))
    if picks_itl(picked):
        keep = IdSet(done).contains if every_id else None
        done.clear()

        def gap_values(_: int) -> Iterator[dict[str, np.ndarray]]:
            for tokens, _carried in token_chunk_parts(chunks(), keep):
                yield {PICKED + ITL.key: chunk_gaps(tokens).gap_s}

        found |= select_passes(gap_values, levels_of(picked))
    return picked_section(picked, found)
