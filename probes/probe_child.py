"""The probe process's own side: ``python -m probes.probe_child``, started by ``ProbeProcess``.

It runs the run's ``MetricsScraper`` and ``GpuSampler`` on the parent's run clock and
speaks the handshake ``probes.probe_process`` describes: the configuration as one JSON
line on stdin, one JSON line once every probe made its first attempt (statuses and the
first scrape's samples), the end of stdin as the stop message, one last line with the
final statuses. A module of its own, apart from the parent's side, so that a fresh
interpreter per run imports only what sampling needs (the parent's side reads the run's
tables: ``runfmt.run`` and what it brings; ``tests/session/test_bench_fixed_cost.py``
keeps the child light).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from probes.exposition import Exposition
from probes.gpu import GpuSampler
from probes.sampling import PeriodicProbe, ProbeStatus
from probes.scraper import MetricsScraper
from runfmt.codec import encode
from runfmt.names import GPU_TABLE, SERVER_METRICS_TABLE
from runfmt.rundir import RunDir
from runtime.child import become_child, say
from runtime.clock import RunClock

#: How long the load waits for the probes' first samples (from their start): a prompt
#: ``/metrics`` answers in milliseconds, and its scrape is the counters' baseline before
#: the first send; a page that stalls does not hold the run's start for a whole scrape
#: timeout — the load begins, the scrape goes on, journaled ``late``.
BASELINE_WAIT_S = 1.0


def encode_exposition(exposition: Exposition | None) -> dict[str, Any] | None:
    """The first scrape as the ready line carries it (``ProbeProcess`` decodes it)."""
    if exposition is None:
        return None
    return {
        "samples": [[s.name, s.labels, s.value] for s in exposition.samples],
        "types": exposition.types,
    }


def _on_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """End of stdin (the parent closed it, or died) is the stop message."""
    if not os.read(sys.stdin.fileno(), 4096):
        loop.remove_reader(sys.stdin.fileno())
        stop.set()


async def _sample(request: dict[str, Any]) -> None:
    clock = RunClock(t0=request["t0"], wall_t0=request["wall_t0"])
    run = RunDir(request["run_dir"])
    interval_s = request["interval_s"]
    probes: dict[str, PeriodicProbe] = {}
    if request["metrics_url"] is not None:
        probes[SERVER_METRICS_TABLE] = MetricsScraper(
            request["metrics_url"],
            clock,
            run,
            interval_s=interval_s,
            timeout_s=request["timeout_s"],
        )
    if request["gpu_mode"] != "off":
        probes[GPU_TABLE] = GpuSampler(clock, run, interval_s=interval_s, mode=request["gpu_mode"])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_reader(sys.stdin.fileno(), _on_stdin, loop, stop)
    for probe in probes.values():
        probe.start()
    began = loop.time()
    for probe in probes.values():
        if not await probe.first_sample(max(0.0, began + BASELINE_WAIT_S - loop.time())):
            probe.status.late(
                f"first sample still in flight {BASELINE_WAIT_S:g} s after it began: the load "
                "starts without it (a baseline taken later misses the first requests)",
                clock.now(),
            )
    scraper = probes.get(SERVER_METRICS_TABLE)
    first = scraper.first if isinstance(scraper, MetricsScraper) else None
    statuses = {name: probe.status for name, probe in probes.items()}
    say({"t_s": clock.now(), "statuses": _dicts(statuses), "first": encode_exposition(first)})
    await stop.wait()
    await asyncio.gather(*(probe.stop() for probe in probes.values()))
    say({"t_s": clock.now(), "statuses": _dicts(statuses)})


def _dicts(statuses: dict[str, ProbeStatus]) -> dict[str, dict[str, Any]]:
    return {name: encode(status.recorded()) for name, status in statuses.items()}


def main() -> None:
    become_child()
    loop = asyncio.new_event_loop()
    loop.run_until_complete(_sample(json.loads(sys.stdin.buffer.readline())))
    # Not ``asyncio.run``: its executor shutdown (and the interpreter's exit) would join a
    # scrape thread abandoned at the run's end, holding the exit for its whole timeout.
    # Every journal row is already written (one ``write`` per append) and the last line said.
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
