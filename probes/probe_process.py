"""The probes of a bench run in a child process: the load generator's loop only sends and reads.

A scrape costs a few ms of CPU (the GET, the parse of a few hundred samples, the
journal rows; ~10 ms when a page needs prometheus_client's parser). Even done in 1 ms
slices on the load generator's event loop, a slice that runs when an open-loop request
is due or a stream's bytes arrive delays it: the dispatch lag and the ITL tail then
carry our own noise. In a child process the probes have their own interpreter (and, on
a multi-core machine, their own core).

The child is ``python -m probes.probe_child`` running the same ``MetricsScraper`` and
``GpuSampler``. Its configuration is one JSON line on stdin, holding the parent's
``RunClock`` anchors: ``time.perf_counter`` is CLOCK_MONOTONIC on Linux, one clock for
the whole system, so ``RunClock(t0=…, wall_t0=…)`` in the child reads the parent's run
time. It appends to the run directory's ``server_metrics``, ``gpu`` and ``probe_events``
journals, which the parent leaves alone until the child has exited; it then adopts them,
so that the run's ``close()`` compacts them with the rest.

The child answers with one JSON line once every probe made its first attempt, or
``probe_child.BASELINE_WAIT_S`` (1 s) passed: the probes' statuses and the first
scrape's samples. Waiting for that line keeps the counters' baseline ahead of the first
request (a page that stalls does not hold the start: the load begins, the scrape is
journaled ``late``; at the run's end a scrape still in flight is abandoned,
``sampling.END_GRACE_S``), and the first scrape the parent reads
(block size and pool size for the oracle, flavour for ``run.json``) is the very one in
the journal — a scrape of its own would be another reading, and a parse on the parent's
loop. Closing its stdin is the stop message: a last sample, a JSON line with the final
statuses, and exit; SIGKILL after a grace period. The child dies with its parent
(``PR_SET_PDEATHSIG``) and ignores SIGINT: Ctrl-C reaches the whole process group, and
the parent decides how a run ends. A child that crashes or hangs is recorded as a
failure of its probes, with what it said on stderr; it never costs the run.

A server that answered detection's ``GET /metrics`` with 404 (or 410) has no metrics
page to scrape: the parent is told so (``metrics_absent``), marks the scraper
``unavailable`` with that answer, and starts no child unless the GPU sampler needs one —
a child's interpreter, imports and failed scrapes are a sixth of a small bench's CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
from typing import IO, TYPE_CHECKING, Any

from probes.exposition import Exposition, Sample
from probes.sampling import ProbeStatus
from probes.scraper import DEFAULT_INTERVAL_S
from runfmt.names import EVENTS_TABLE, GPU_TABLE, SERVER_METRICS_TABLE
from runfmt.run import Run
from runfmt.rundir import RunDir
from runtime import redact
from runtime.child import read_message, stop_process
from runtime.clock import RunClock

if TYPE_CHECKING:
    import pandas as pd

#: The run tables the child writes.
CHILD_TABLES = (SERVER_METRICS_TABLE, GPU_TABLE, EVENTS_TABLE)
#: Time for the child's imports and first samples, on top of a scrape's own timeout.
_START_GRACE_S = 30.0
#: Time for the last samples and the exit, on top of a scrape's own timeout.
_STOP_GRACE_S = 5.0
#: How much of a dead child's stderr its probes' reason quotes (lines).
_STDERR_TAIL = 3


class ProbeProcess:
    """The ``/metrics`` scraper (``metrics_url``, the scrape URL; None for none) and the GPU sampler
    (``gpu_mode`` ``auto`` or ``off``) of a run, sampling ``run`` on ``clock`` from a
    child process; ``start()`` returns once they took their first samples, ``stop()``
    after their last. No probe to run: no child. ``metrics_absent``: why the server has
    no page at ``metrics_url`` (``absent_metrics_reason``); the scraper is then
    ``unavailable`` and does not run.

    ``statuses`` holds a ``ProbeStatus`` per probe on; ``first`` the first scrape.
    """

    def __init__(
        self,
        run: RunDir,
        clock: RunClock,
        *,
        metrics_url: str | None = None,
        gpu_mode: str = "off",
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = 5.0,
        metrics_absent: str | None = None,
    ) -> None:
        if gpu_mode not in ("auto", "off"):
            raise ValueError(f"gpu mode must be auto or off, got {gpu_mode!r}")
        self.run = run
        self.clock = clock
        self.metrics_url = metrics_url
        self.gpu_mode = gpu_mode
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.statuses: dict[str, ProbeStatus] = {}
        self._absent: ProbeStatus | None = None
        if metrics_url is not None:
            self.statuses[SERVER_METRICS_TABLE] = ProbeStatus(SERVER_METRICS_TABLE)
            if metrics_absent is not None:
                self._absent = self.statuses[SERVER_METRICS_TABLE]
                self._absent.unavailable(metrics_absent)  # journaled by stop()
        if gpu_mode != "off":
            self.statuses[GPU_TABLE] = ProbeStatus(GPU_TABLE)
        self.first: Exposition | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._silent_s: float | None = None

    async def start(self) -> None:
        """Start the child and wait for its first samples (a child that cannot start is
        recorded in ``statuses``)."""
        scrape = self.metrics_url if self._absent is None else None
        if self._proc is not None or (scrape is None and self.gpu_mode == "off"):
            return
        request = {
            "run_dir": str(self.run.path),
            "t0": self.clock.t0,
            "wall_t0": self.clock.wall_t0,
            "metrics_url": scrape,
            "gpu_mode": self.gpu_mode,
            "interval_s": self.interval_s,
            "timeout_s": self.timeout_s,
        }
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (read back when it died)
        # Started from the event loop's thread, which outlives the child: the parent-death
        # signal follows the thread that forked, so a worker thread would kill it early.
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "probes.probe_child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(request).encode() + b"\n")
        self._proc.stdin.flush()
        wait_s = self.timeout_s + _START_GRACE_S
        try:
            message = await asyncio.to_thread(read_message, self._proc, wait_s)
        except BaseException:  # cancelled: stop() finds it dead and says so
            self._proc.kill()
            raise
        if message is None:
            if self._proc.poll() is None:  # alive but silent: hung
                self._proc.kill()
                self._silent_s = wait_s
            await self.stop()
            return
        self._update(message)
        self.first = _decode_exposition(message["first"])

    async def stop(self) -> None:
        """Take the last samples and wait for the child; then its tables are the run's
        (call it even when no child ran: the run still gets its empty probe tables)."""
        proc, self._proc = self._proc, None
        if proc is None:
            self._adopt_tables()
            self._journal_absent()
            return
        wait_s = self.timeout_s + _STOP_GRACE_S
        message, killed = await asyncio.to_thread(_stop, proc, wait_s)
        if killed:
            self._silent_s = wait_s
        self._adopt_tables()
        self._journal_absent()
        if message is not None:
            self._update(message)
        else:
            self._lost(proc)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _adopt_tables(self) -> None:
        """Open the child's tables in the parent, now that the child has exited: the run's
        ``close()`` then compacts them, and a run has every table, empty for a probe off."""
        for name in CHILD_TABLES:
            self.run.table(name)

    def _journal_absent(self) -> None:
        """The absent page's ``unavailable`` row in ``probe_events``, once the child (which
        owns that journal while it runs) has exited."""
        status, self._absent = self._absent, None
        if status is not None and status.reason is not None:
            status.journal = self.run.table(EVENTS_TABLE)
            status.unavailable(status.reason)
            status.journal = None

    def _update(self, message: dict[str, Any]) -> None:
        for name, status in message["statuses"].items():
            self.statuses[name] = ProbeStatus(name, **status)

    def _lost(self, proc: subprocess.Popen[bytes]) -> None:
        """Mark the probes the dead child was running failed, with its exit and stderr."""
        if self._silent_s is not None:
            ended = f"did not answer within {self._silent_s:.0f} s"
        else:
            ended = _exit_description(proc.returncode)
        reason = f"probe process {ended}: {self._stderr_tail()}"
        events = Run.at(self.run).tables.probe_events
        journal = self.run.table(EVENTS_TABLE)
        now = self.clock.now()
        for name, status in self.statuses.items():
            if status.state in ("off", "unavailable"):
                continue
            status.ok, status.failed = _journaled_attempts(self.run, name, events)
            status.journal = journal
            status.lost(reason, now)
            status.journal = None

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return "no output"
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return " / ".join(lines[-_STDERR_TAIL:]) or "no output"

    async def __aenter__(self) -> ProbeProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


def absent_metrics_reason(url: str | None, status: int | None) -> str | None:
    """Why ``url`` is not worth scraping, from the HTTP status a GET of it was answered
    with before the run (404 or 410: the server serves no such page); None otherwise —
    a refusal (401, 403), a server error or no answer may pass, and the scraper tries."""
    if url is None or status not in (404, 410):
        return None
    return (
        f"{redact.text(url)} answered HTTP {status} when the target was detected: the server "
        "serves no metrics there (server-side figures need an engine that exports /metrics)"
    )


def _journaled_attempts(run: RunDir, name: str, events: pd.DataFrame) -> tuple[int, int]:
    """A probe's (ok, failed) counts as its journals tell them: the statuses of a child
    that died are those of its last message, samples ago. Every sample of one attempt
    carries that attempt's ``t_s``."""
    samples = Run.at(run).tables.read(name)
    ok = int(samples["t_s"].nunique()) if not samples.empty else 0
    if events.empty:
        return ok, 0
    return ok, int(((events["probe"] == name) & (events["event"] == "failed")).sum())


def _exit_description(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exited with status {returncode}"


def _stop(proc: subprocess.Popen[bytes], timeout_s: float) -> tuple[dict[str, Any] | None, bool]:
    """Send the stop message (stdin closed), read the final line, reap the child; the
    line (None when it died without one) and whether it had to be SIGKILLed, silent or
    still running ``timeout_s`` later."""
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    message = read_message(proc, timeout_s) if proc.poll() is None else None
    killed = stop_process(proc, timeout_s if message is not None else 0.5, terminate=False)
    proc.stdout.close()
    return message, killed


def _decode_exposition(data: dict[str, Any] | None) -> Exposition | None:
    if data is None:
        return None
    return Exposition([Sample(*sample) for sample in data["samples"]], data["types"])
