"""``summary.json`` of a finished bench run, from its closed tables.

The client's figures (``probes.latency.summarize_frames``: latency, throughput, goodput
against the SLO, prefix hit rates, the measured requests by kind), vLLM-style extra
percentiles when asked, and the ``server`` section: from the run's own ``/metrics``
scrapes, and from a Prometheus server over the run's window when one was given
(``server_prometheus`` beside a scraped section, in its place when nothing was scraped).
The statistics read the run's tables as numpy ``Columns`` a part at a time
(``RunTables.parts``): a bench imports no pandas, whose import alone was a fifth of a
16-request run's CPU, and holds no table whole, so its memory at the end does not grow
with the run's length (``benchmarks/soak.py``): vLLM's extra percentiles, when asked
for, and the server's scraped samples (``probes.timeline.server_series``, a scrape at a
time) are read so too.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from loadgen.load_options import LoadResult
from runfmt.names import CHUNKS_TABLE, CLIENT_TABLE, REQUESTS_TABLE, RUN_JSON, SUMMARY_JSON
from runfmt.run import Run
from runfmt.run_sections import ProbeState, PrometheusProbe
from runfmt.rundir import RunDir, RunWriteError
from runfmt.runinfo import RunInfo
from runfmt.summary import Summary
from runfmt.summary_server import ServerSection
from runtime.clock import RunClock

if TYPE_CHECKING:
    from collections.abc import Iterator

    from probes.prometheus_source import PrometheusSource
    from runfmt.columns import Columns
    from session.bench_options import BenchOptions

#: Resolution of the series read back from a Prometheus server.
PROMETHEUS_STEP_S = 1.0


async def write_summary(
    run: RunDir,
    info: RunInfo,
    result: LoadResult,
    options: BenchOptions,
    prometheus: PrometheusSource | None,
    clock: RunClock,
) -> Summary:
    """Write ``summary.json`` (and ``run.json`` again once the Prometheus probe's status is
    known); returns the summary written."""
    from probes.latency import summarize_frames, summary_columns
    from probes.server_summary import server_summary
    from probes.timeline import server_series

    tables = Run.at(run).tables

    # numpy columns a part at a time: no pandas, and no table whole at a bench's end
    def requests() -> Iterator[Columns]:
        return tables.parts(REQUESTS_TABLE, summary_columns())

    def chunks() -> Iterator[Columns]:  # the client's longest gap bounds the server's ITL
        return tables.parts(CHUNKS_TABLE)

    # vLLM's extra percentiles, when asked for, in the same passes over the parts
    summary = summarize_frames(
        requests, chunks, tables.columns(CLIENT_TABLE), options.slo, options.percentiles
    )
    server_probe = info.probes.server_metrics  # the bench always records its probes
    status = server_probe.status if server_probe is not None else ProbeState()
    # off, unavailable (no page to scrape) or failed (nothing scraped, or the user's
    # mapping file unusable): no series
    series = server_series(run) if status.state not in ("off", "unavailable", "failed") else None
    scraped = server_summary(series, requests, probe=status, chunks=chunks)
    summary = replace(summary, server=scraped)
    if prometheus is not None:
        section = await _from_prometheus(prometheus, result, requests, chunks, clock)
        recorded = info.probes.prometheus or PrometheusProbe(url=prometheus.url)
        info = replace(
            info,
            probes=replace(
                info.probes, prometheus=replace(recorded, status=prometheus.status.recorded())
            ),
        )
        if scraped.available:
            summary = replace(summary, server_prometheus=section)
        else:
            summary = replace(summary, server=section)
        with contextlib.suppress(RunWriteError):
            run.write_json(RUN_JSON, info.to_json())
    with contextlib.suppress(RunWriteError):  # the disk full: the run says it is not there
        run.write_json(SUMMARY_JSON, summary.to_json())
    return summary


async def _from_prometheus(
    prometheus: PrometheusSource, result: LoadResult, requests: Any, chunks: Any, clock: RunClock
) -> ServerSection:
    """The ``server`` section from the Prometheus server over the run's window."""
    from probes.server_summary import server_summary

    start = result.started_s or 0.0
    end = max(result.ended_s or clock.now(), start + PROMETHEUS_STEP_S)
    series = await asyncio.to_thread(prometheus.server_series, clock, start, end, PROMETHEUS_STEP_S)
    probe = prometheus.status.recorded()
    return server_summary(series, requests, probe=probe, source="prometheus", chunks=chunks)
