"""``benchmarks/cpu_slices.py``: the slices the client-limit sweep gives each client process.

They need cgroup v1's ``cpu`` controller and root; elsewhere these tests are skipped.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import cpu_slices  # noqa: E402

pytestmark = pytest.mark.skipif(
    cpu_slices.unavailable() is not None, reason=str(cpu_slices.unavailable())
)

SPIN = "import time\nend = time.perf_counter() + 1.5\nwhile time.perf_counter() < end: pass"


def cgroup_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    raise AssertionError(f"no cpu controller line for {pid}")


def test_a_slice_caps_a_busy_process_at_its_share_of_a_core():
    """A process that would use a whole core gets at most a quarter of one in a slice of
    four, and waits out the rest of its periods.

    Without the quota the spinning child takes ~1.0 of a core on a quiet machine and
    about half of one beside a CPU hog on two cores; a busier machine can only lower
    its share, never raise it above the quota."""
    slices = cpu_slices.CpuSlices(4)
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        child = subprocess.Popen([sys.executable, "-c", SPIN])
        slices.place(child.pid, 1)
        wall0 = time.perf_counter()
        child.wait()
        wall = time.perf_counter() - wall0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        assert cpu / wall < 0.3, (cpu, wall)
        assert slices.throttled_s() > 0  # it waited out the rest of its periods
    finally:
        slices.close()
    assert not slices.base.exists()


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def test_workers_of_a_fork_server_are_placed_one_per_slice():
    """``place_workers`` finds a fork server's workers (this process's grandchildren)
    and moves each into a slice of its own, in the order they were started."""
    slices = cpu_slices.CpuSlices(2)
    context = multiprocessing.get_context("forkserver")
    processes = []
    try:
        placer = cpu_slices.place_workers(slices, 2, timeout_s=20.0)
        for _ in range(2):
            process = context.Process(target=_sleep, args=(3.0,))
            process.start()
            processes.append(process)
        placer.join()
        pids = [p.pid for p in processes]
        assert sorted(placer.placed) == sorted(pids)
        groups = {cgroup_of(pid) for pid in pids}
        assert groups == {f"/{slices.base.name}/s0", f"/{slices.base.name}/s1"}
        assert slices.base.name not in cgroup_of(os.getpid())
    finally:
        for process in processes:
            process.terminate()
            process.join()
        slices.close()
