"""What server-metrics probing costs the client: CPU per scrape, and reading a run back.

The scraper shares the client's CPU with the load generator (two cores on our boxes),
so a scrape every 0.5 s must stay a small share of one core, and must not stall the
event loop that timestamps tokens. For each real capture in tests/fixtures this prints
the samples per scrape, the milliseconds of CPU to parse one and turn it into run-table
rows, and the share of a core that is at a 0.5 s interval; then, for the largest
capture, the event-loop stalls (p95 of gaps) while parsing it in one piece and cooperatively
(as the scraper does), and the seconds to normalise an hour-long run's worth of its
scrapes (7200) into canonical series.

Run: ``.venv/bin/python benchmarks/probe_overhead.py [--scrapes 7200] [--repeat 50]``
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pandas as pd

from probes.exposition import parse_exposition, parse_exposition_cooperatively
from probes.normalise import ServerSeries
from probes.scraper import DEFAULT_INTERVAL_S, sample_rows
from runtime.quantiles import quantile

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def per_scrape(text: str, repeat: int) -> tuple[int, float]:
    """Samples per scrape and CPU seconds for parse + rows, averaged over ``repeat``."""
    start = time.process_time()
    for _ in range(repeat):
        rows = sample_rows(0.0, parse_exposition(text))
    return len(rows), (time.process_time() - start) / repeat


async def stall_p95(parse: Callable[[], Awaitable[object]], repeat: int) -> float:
    """95th percentile of the gaps between wake-ups of a task that only yields, while
    ``parse`` runs ``repeat`` times (a busy machine adds its own preemptions to both)."""
    gaps: list[float] = []
    running = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not running.is_set():
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    for _ in range(repeat):
        await parse()
        await asyncio.sleep(0)
    running.set()
    await task
    return quantile(gaps, 0.95)


async def stalls(text: str, repeat: int) -> tuple[float, float]:
    async def in_one_piece() -> None:
        parse_exposition(text)

    async def cooperatively() -> None:
        await parse_exposition_cooperatively(text)

    return await stall_p95(in_one_piece, repeat), await stall_p95(cooperatively, repeat)


def normalise_seconds(text: str, scrapes: int) -> float:
    rows = sample_rows(0.0, parse_exposition(text))
    table = pd.DataFrame(
        [row | {"t_s": k * DEFAULT_INTERVAL_S} for k in range(scrapes) for row in rows]
    )
    start = time.perf_counter()
    ServerSeries.from_samples(table)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=7200)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    captures = sorted(
        [
            *FIXTURES.glob("metrics/*.prom"),
            *FIXTURES.glob("vllm-cpu/*.prom"),
            *FIXTURES.glob("llamacpp/metrics-*.txt"),
        ]
    )
    print(f"{'capture':48} {'samples':>8} {'ms/scrape':>10} {'core share':>11}")
    largest = ""
    for path in captures:
        text = path.read_text()
        samples, cpu_s = per_scrape(text, args.repeat)
        share = cpu_s / DEFAULT_INTERVAL_S
        name = f"{path.parent.name}/{path.name}"
        print(f"{name:48} {samples:8d} {cpu_s * 1e3:10.2f} {share:11.2%}")
        largest = text if len(text) > len(largest) else largest
    whole, sliced = asyncio.run(stalls(largest, args.repeat))
    print(
        f"event-loop stall p95: one piece {whole * 1e3:.1f} ms, cooperative {sliced * 1e3:.1f} ms"
    )
    seconds = normalise_seconds(largest, args.scrapes)
    print(f"normalising {args.scrapes} scrapes of the largest capture: {seconds:.1f} s")


if __name__ == "__main__":
    main()
