"""``loadgen.health``: the client's own health rows (loop lag, CPU share) in the run."""

from __future__ import annotations

import asyncio

from loadgen.health import ClientMonitor
from runfmt.names import CLIENT_TABLE
from runfmt.rundir import RunDir
from runfmt.tables import RunTables
from runtime.clock import RunClock
from runtime.timing import Waker


def test_each_sample_is_a_row_on_the_run_clock_and_the_summary_totals_them(tmp_path):
    run = RunDir(tmp_path, create=True)
    clock = RunClock()
    monitor = ClientMonitor(clock, run.table(CLIENT_TABLE), interval_s=0.001)

    async def sample_three_times() -> None:
        for _ in range(3):
            await monitor.sample()

    asyncio.run(sample_three_times())
    waker = Waker(clock.now)
    summary = monitor.summary(waker)
    run.close()
    rows = RunTables(run).client
    assert list(rows.columns) == ["t_s", "loop_lag_s", "cpu_share"]
    assert len(rows) == 3 == summary.samples
    assert rows["t_s"].is_monotonic_increasing and (rows["t_s"] >= 0).all()
    assert (rows["loop_lag_s"] >= 0).all()
    assert summary.loop_lag_max_s == rows["loop_lag_s"].max()
    assert summary.cpu_s >= 0 and summary.cpu_share is not None
    assert summary.timer.wakeups == 0 and summary.timer.spin_s == waker.spin_s


def test_run_samples_until_cancelled(tmp_path):
    run = RunDir(tmp_path, create=True)
    monitor = ClientMonitor(RunClock(), run.table(CLIENT_TABLE), interval_s=0.0)

    async def until_two_samples() -> None:
        task = asyncio.create_task(monitor.run())
        while monitor.samples < 2:
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(until_two_samples())
    assert monitor.samples >= 2
