"""The probes in a child process: the parent's clock, the run's tables, failures kept.

Scrapes are served from real captures over loopback (``ReplayServer``); the child is the
real ``python -m probes.probe_child``, crashed with real signals.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from probe_servers import ReplayServer
from repo_paths import FIXTURES

from probes.exposition import metrics_url
from probes.gpu import GPU_TABLE
from probes.normalise import ServerSeries
from probes.probe_process import CHILD_TABLES, ProbeProcess, absent_metrics_reason
from probes.scraper import SERVER_METRICS_TABLE
from runfmt.rundir import RunDir
from runfmt.tables import RunTables
from runtime.clock import RunClock

T = TypeVar("T")
BEFORE = (FIXTURES / "vllm-cpu/tiny-metrics-before.prom").read_text()
AFTER = (FIXTURES / "vllm-cpu/tiny-metrics-after.prom").read_text()

#: A child that reads its parent's run clock for every line it gets.
CLOCK_ECHO = (
    "import sys\n"
    "from runtime.clock import RunClock\n"
    "clock = RunClock(t0=float(sys.argv[1]), wall_t0=float(sys.argv[2]))\n"
    "for _ in sys.stdin:\n"
    "    print(repr(clock.now()), flush=True)\n"
)


def test_a_timestamp_in_the_child_is_on_the_parents_run_clock() -> None:
    """perf_counter is system-wide (CLOCK_MONOTONIC): a RunClock rebuilt from the parent's
    t0 in another process reads the parent's run time, to well within a millisecond."""
    clock = RunClock()
    child = subprocess.Popen(
        [sys.executable, "-c", CLOCK_ECHO, repr(clock.t0), repr(clock.wall_t0)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    errors = []
    try:
        for _ in range(30):
            before = clock.now()
            child.stdin.write("now?\n")
            child.stdin.flush()
            theirs = float(child.stdout.readline())
            after = clock.now()
            assert before <= theirs <= after  # the child's reading lies inside the round trip
            errors.append(max(theirs - before, after - theirs))
    finally:
        child.stdin.close()
        child.wait(10)
    assert min(errors) < 1e-3


def scrape_in_child(
    tmp_path: Path,
    responses: list[str | int],
    during: Callable[[ProbeProcess, subprocess.Popen[bytes]], Awaitable[T]],
    **options: Any,
) -> tuple[ProbeProcess, RunDir, T]:
    """Probes scraping ``responses`` every 50 ms from a child; ``during(probes, child)``
    runs between their start and their stop, and what it returns is returned."""
    run = RunDir(tmp_path / "run", create=True)
    with ReplayServer(responses) as server:
        url = metrics_url(server.url)
        probes = ProbeProcess(run, RunClock(), metrics_url=url, interval_s=0.05, **options)

        async def main() -> T:
            await probes.start()
            assert probes._proc is not None
            try:
                return await during(probes, probes._proc)
            finally:
                await probes.stop()

        result = asyncio.run(main())
    return probes, run, result


async def wait(probes: ProbeProcess, child: subprocess.Popen[bytes]) -> tuple[float, int, set]:
    """Half a second of sampling; when it began, the child's pid, the tables the parent
    had open meanwhile."""
    began = probes.clock.now()
    await asyncio.sleep(0.5)
    return began, child.pid, set(probes.run._writers)


def test_the_child_scrapes_into_the_run_on_the_parents_clock(tmp_path: Path) -> None:
    probes, run, (began, child, opened) = scrape_in_child(tmp_path, [BEFORE, BEFORE, AFTER], wait)
    stopped = probes.clock.now()
    assert child != os.getpid()
    assert not opened & set(CHILD_TABLES)  # the parent left the child's tables alone
    status = probes.statuses[SERVER_METRICS_TABLE]
    assert status.state == "ok" and status.failed == 0 and status.ok >= 3
    # The first scrape came back to the parent, parsed, before the load would start.
    assert probes.first is not None
    hits = probes.first.get("vllm:prefix_cache_hits_total")
    assert hits[0].labels == {"engine": "0", "model_name": "tiny-llama"}
    assert probes.first.types["vllm:prefix_cache_hits"] == "counter"
    run.close()  # the parent's close compacts what the child wrote
    assert (run.path / f"{SERVER_METRICS_TABLE}.parquet").exists()
    table = RunTables(run).server_metrics
    times = sorted(table["t_s"].unique())
    assert len(times) == status.ok
    assert 0 < times[0] < began < times[-1] < stopped  # the child's readings, parent's clock
    series = ServerSeries.from_samples(table)
    assert series.flavour == "vllm" and series.increase("prefix_hits").value == 2432.0


def test_no_probe_no_child_and_empty_tables(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run", create=True)
    probes = ProbeProcess(run, RunClock())

    async def main() -> None:
        await probes.start()
        await probes.stop()

    asyncio.run(main())
    assert probes._proc is None and probes.statuses == {} and probes.first is None
    run.close()
    for name in CHILD_TABLES:
        assert (run.path / f"{name}.parquet").exists() and RunTables(run).read(name).empty


def test_a_page_known_absent_starts_no_child_and_says_why(tmp_path: Path) -> None:
    """Detection saw /metrics answer 404: no child is started to fail its scrapes; the
    scraper is unavailable with that answer, journaled once, and the URL's key redacted."""
    url = "http://127.0.0.1:9/metrics?api_key=sk-secret-1234567890"
    reason = absent_metrics_reason(url, 404)
    assert reason is not None and "HTTP 404" in reason and "sk-secret" not in reason
    assert absent_metrics_reason(url, 403) is None and absent_metrics_reason(url, None) is None
    assert absent_metrics_reason(None, 404) is None
    run = RunDir(tmp_path / "run", create=True)
    probes = ProbeProcess(run, RunClock(), metrics_url=url, metrics_absent=reason)

    async def main() -> None:
        await probes.start()
        assert probes._proc is None
        await probes.stop()

    asyncio.run(main())
    status = probes.statuses[SERVER_METRICS_TABLE]
    assert (status.state, status.reason, status.ok, status.failed) == ("unavailable", reason, 0, 0)
    run.close()
    assert RunTables(run).server_metrics.empty
    (event,) = RunTables(run).probe_events.to_dict("records")
    assert (event["probe"], event["event"], event["reason"]) == (
        SERVER_METRICS_TABLE,
        "unavailable",
        reason,
    )


def signalled(sig: int, after_s: float = 0.0) -> Callable:
    """``during``: sample ``after_s``, send the child ``sig``, give it 0.3 s; returns
    whether it was still alive."""

    async def during(probes: ProbeProcess, child: subprocess.Popen[bytes]) -> bool:
        await asyncio.sleep(after_s)
        os.kill(child.pid, sig)
        await asyncio.sleep(0.3)
        return child.poll() is None

    return during


def test_a_server_without_metrics_is_a_failed_probe_not_a_failed_child(tmp_path: Path) -> None:
    probes, run, _ = scrape_in_child(tmp_path, [404], wait, gpu_mode="auto")
    status = probes.statuses[SERVER_METRICS_TABLE]
    assert status.state == "failed" and "HTTP 404" in (status.reason or "")
    assert status.failed >= 3 and probes.first is None
    assert probes.statuses[GPU_TABLE].state in ("ok", "unavailable")  # the other probe ran
    run.close()
    events = RunTables(run).probe_events
    assert (events[events["probe"] == SERVER_METRICS_TABLE]["event"] == "failed").sum() == (
        status.failed
    )


def test_a_child_killed_mid_run_is_a_lost_probe_with_its_samples_kept(tmp_path: Path) -> None:
    probes, run, alive = scrape_in_child(tmp_path, [BEFORE], signalled(signal.SIGKILL, 0.3))
    assert not alive
    status = probes.statuses[SERVER_METRICS_TABLE]
    assert status.state == "partial"
    assert status.reason == "probe process killed by SIGKILL: no output"
    run.close()
    table = RunTables(run).server_metrics
    assert status.ok == table["t_s"].nunique() >= 3  # counted from what it journaled
    (event,) = RunTables(run).probe_events.to_dict("records")
    assert event["probe"] == SERVER_METRICS_TABLE and event["reason"] == status.reason


def test_a_crashed_child_is_reported_with_its_stderr(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")  # an abort prints the child's stacks
    probes, _, alive = scrape_in_child(tmp_path, [BEFORE], signalled(signal.SIGABRT))
    assert not alive
    reason = probes.statuses[SERVER_METRICS_TABLE].reason or ""
    assert reason.startswith("probe process killed by SIGABRT: ")
    assert "_run_module_as_main" in reason or "Extension modules" in reason  # its last lines


def test_the_child_ignores_ctrl_c(tmp_path: Path) -> None:
    """SIGINT reaches the whole process group; only the parent decides how a run ends."""
    probes, _, alive = scrape_in_child(tmp_path, [BEFORE], signalled(signal.SIGINT))
    assert alive
    status = probes.statuses[SERVER_METRICS_TABLE]
    assert status.state == "ok" and status.ok >= 2


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_child_dies_with_its_parent(tmp_path: Path) -> None:
    """A bench that is SIGKILLed must not leave a probe process scraping behind it."""
    script = (
        "import asyncio, sys\n"
        "from runtime.clock import RunClock\n"
        "from runfmt.rundir import RunDir\n"
        "from probes.probe_process import ProbeProcess\n"
        "async def main():\n"
        "    probes = ProbeProcess(RunDir(sys.argv[1]), RunClock(), gpu_mode='auto')\n"
        "    await probes.start()\n"
        "    print(probes._proc.pid, flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    run = RunDir(tmp_path / "run", create=True)
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(run.path)], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert not _gone(child, 0.2)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert _gone(child)


def test_the_ready_line_is_read_on_the_parents_clock(tmp_path: Path) -> None:
    """The child's own report of the run time when it was ready lies between its start
    and the parent reading it: the child's timestamps are the parent's."""
    run = RunDir(tmp_path / "run", create=True)
    clock = RunClock()
    request = {
        "run_dir": str(run.path),
        "t0": clock.t0,
        "wall_t0": clock.wall_t0,
        "metrics_url": None,
        "gpu_mode": "auto",
        "interval_s": 0.5,
        "timeout_s": 5.0,
    }
    started = clock.now()
    child = subprocess.Popen(
        [sys.executable, "-m", "probes.probe_child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(json.dumps(request) + "\n")
    child.stdin.flush()
    ready = json.loads(child.stdout.readline())
    read = clock.now()
    child.stdin.close()  # the stop message
    final = json.loads(child.stdout.readline())
    assert child.wait(10) == 0
    assert started < ready["t_s"] < read < final["t_s"]
    assert set(ready["statuses"]) == {GPU_TABLE} and ready["first"] is None
