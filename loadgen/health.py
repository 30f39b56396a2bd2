"""Client health, sampled through a run: event-loop lag and the client's CPU share.

A load generator that cannot keep up makes the server look better than it is (late
sends, late reads). Dispatch lag per request is on each record (``sent_s -
intended_s``); this monitor adds, every ``interval_s``, a row ``t_s, loop_lag_s,
cpu_share`` to the run's ``client`` table:

* ``loop_lag_s``: how long a callback made ready now waits for the loop to run it (one
  ``sleep(0)`` round trip), i.e. how late the client notices a chunk that just arrived.
  Measured this way, not as timer overshoot, so the timer's millisecond granularity
  does not pose as lag.
* ``cpu_share``: CPU time of the event-loop thread over wall time since the last sample
  (1.0 = one core saturated). The thread's, not the process's: an embedded engine on
  another thread of the same process is not the client.

The monitor sleeps between samples, so an idle client stays idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from runfmt.run_result import ClientAccount, SendTimer
from runfmt.rundir import RunWriteError, TableWriter
from runtime.clock import RunClock
from runtime.timing import Waker

DEFAULT_INTERVAL_S = 0.2


class ClientMonitor:
    def __init__(
        self, clock: RunClock, table: TableWriter, interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        self.clock = clock
        self.table = table
        self.interval_s = interval_s
        self.samples = 0
        self.max_loop_lag_s = 0.0
        self._wall = self._wall_start = time.perf_counter()
        self._cpu = self._cpu_start = time.thread_time()

    async def run(self) -> None:
        """Sample until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s)
            await self.sample()

    async def sample(self) -> None:
        ready = time.perf_counter()
        await asyncio.sleep(0)
        lag = time.perf_counter() - ready
        wall, cpu = time.perf_counter(), time.thread_time()
        share = (cpu - self._cpu) / (wall - self._wall) if wall > self._wall else None
        self._wall, self._cpu = wall, cpu
        self.samples += 1
        self.max_loop_lag_s = max(self.max_loop_lag_s, lag)
        with contextlib.suppress(RunWriteError):  # the run directory reports it
            self.table.append(
                {"t_s": self.clock.from_perf(ready), "loop_lag_s": lag, "cpu_share": share}
            )

    def summary(self, waker: Waker) -> ClientAccount:
        """Totals since the monitor was made: samples, worst loop lag, mean CPU share, and
        how the run's send timer ``waker`` went."""
        wall = time.perf_counter() - self._wall_start
        cpu = time.thread_time() - self._cpu_start
        timer = SendTimer(
            wakeups=waker.wakeups,
            recent_wake_late_max_s=waker.recent_late_max_s,
            spin_s=waker.spin_s,
            widest_spin_s=waker.widest_s,
        )
        return ClientAccount(
            samples=self.samples,
            loop_lag_max_s=self.max_loop_lag_s,
            cpu_s=cpu,
            cpu_share=cpu / wall if wall > 0 else None,
            timer=timer,
        )
