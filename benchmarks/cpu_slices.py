"""One core cut into CPU-bandwidth slices: a machine of more, slower cores, for a sweep.

A 2-core machine cannot give a mock a core of its own and each of two client processes
another. ``CpuSlices(k)`` cuts a core into ``k`` slices with the kernel's CFS bandwidth
control (the cgroup v1 ``cpu`` controller, which this machine mounts at
``/sys/fs/cgroup/cpu``): a process in slice ``i`` may run ``period / k`` of every
``period`` (10 ms by default), however idle the core is otherwise. With the client
processes pinned to that core, one slice each, a client of one process has ``1/k`` of
a core and a client of ``n ≤ k`` processes has ``n/k``: the shape of a machine whose
client cores are ``k`` times slower, the mock keeping a whole core of its own.

What the slice adds: a process that spends its quota early in a period waits for the
next one, at most ``period − period / k`` (5 ms with two slices of 10 ms), which shows
in its per-token gaps as it would on a core held by another job for that long.
Real-time (``SCHED_FIFO``) processes are not limited by CFS bandwidth, so clients in
slices run at ordinary priority.

Written here because no package does it: cgroup libraries wrap systemd or cgroup v2;
these are four files of cgroup v1. Needs root.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

#: Where cgroup v1 mounts its ``cpu`` controller.
CPU_CONTROLLER = Path("/sys/fs/cgroup/cpu")
DEFAULT_PERIOD_US = 10_000


def unavailable() -> str | None:
    """Why slices cannot be made here, or None when they can."""
    if not (CPU_CONTROLLER / "cpu.cfs_quota_us").exists():
        return f"no cgroup v1 cpu controller at {CPU_CONTROLLER} (CFS bandwidth control)"
    if not os.access(CPU_CONTROLLER, os.W_OK):
        return f"{CPU_CONTROLLER} is not writable: run as root"
    return None


class CpuSlices:
    """``count`` slices of one core's time, each a cgroup of its own; ``close`` removes
    them, giving their processes back to the root group."""

    def __init__(self, count: int, period_us: int = DEFAULT_PERIOD_US) -> None:
        if count < 1:
            raise ValueError("count must be at least 1")
        self.count = count
        self.capacity = 1.0 / count
        self.base = CPU_CONTROLLER / f"prefillscope-slices-{os.getpid()}"
        self.base.mkdir()
        self.groups = []
        for index in range(count):
            group = self.base / f"s{index}"
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text(str(period_us))
            (group / "cpu.cfs_quota_us").write_text(str(period_us // count))
            self.groups.append(group)

    def place(self, pid: int, index: int) -> None:
        """Move process ``pid`` (all its threads) into slice ``index``."""
        (self.groups[index % self.count] / "cgroup.procs").write_text(str(pid))

    def release(self, pid: int) -> None:
        """Give process ``pid`` back to the root group: all of the core again."""
        (CPU_CONTROLLER / "cgroup.procs").write_text(str(pid))

    def throttled_s(self) -> float:
        """Seconds the slices' processes waited for their next period, all slices."""
        total_ns = 0
        for group in self.groups:
            for line in (group / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "throttled_time":
                    total_ns += int(value)
        return total_ns / 1e9

    def close(self) -> None:
        for group in self.groups:
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        self.release(int(pid))
            with contextlib.suppress(OSError):
                group.rmdir()
        with contextlib.suppress(OSError):
            self.base.rmdir()


def grandchildren(pid: int) -> list[int]:
    """Processes whose parent is a child of ``pid``, oldest first: a forkserver's workers
    (the fork server is the child, its workers the grandchildren)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    children = {p for p, parent in parents.items() if parent == pid}
    return sorted(p for p, parent in parents.items() if parent in children)


class WorkerPlacer(threading.Thread):
    """Puts each of the next ``workers`` worker processes this process starts into a
    slice of its own, in the order they start, as soon as each appears (long before its
    run starts: a worker imports for a few hundred milliseconds first). ``join()`` it
    after the run; ``placed`` lists the pids it moved."""

    def __init__(self, slices: CpuSlices, workers: int, timeout_s: float = 30.0) -> None:
        super().__init__(name="slice-placer", daemon=True)
        self.slices, self.workers, self.timeout_s = slices, workers, timeout_s
        self.placed: list[int] = []

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while len(self.placed) < self.workers and time.monotonic() < deadline:
            for pid in grandchildren(os.getpid()):
                if pid not in self.placed and len(self.placed) < self.workers:
                    with contextlib.suppress(OSError):
                        self.slices.place(pid, len(self.placed))
                        self.placed.append(pid)
            time.sleep(0.002)


def place_workers(slices: CpuSlices, workers: int, timeout_s: float = 30.0) -> WorkerPlacer:
    """A started ``WorkerPlacer``: worker ``i`` goes into slice ``i``."""
    placer = WorkerPlacer(slices, workers, timeout_s)
    placer.start()
    return placer
