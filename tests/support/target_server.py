"""A real server target for the tests (a target script's ``run``): started on a free port in
its own process group, waited on ``/health``, stopped with SIGTERM then SIGKILL.

Shared by the session-wide fixtures of the real targets (``real_vllm``, ``real_sglang``).
The group is not a new session: Linux's autogroup scheduling would then give the
server's busy workers as much CPU as every other process of the session together, and
starve the client processes the tests start. The server dies with the test process
however that ends: a SIGTERM or SIGHUP to pytest tears the fixture down (``conftest``),
and a SIGKILL makes the kernel SIGTERM the server (``runtime.lifetime.dying_with_us``).
Its output goes to a log file whose tail is the failure message when it does not come
up, and is added to the report of a failed test that used it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from probe_servers import free_port
from repo_paths import TARGETS

from runtime.lifetime import dying_with_us

#: Where the target scripts install their servers (each in a folder of its name), as their
#: ``DIR`` default: ``$PREFILLSCOPE_TARGETS_DIR``, else ``~/.cache/prefillscope-targets``.
TARGETS_DIR = Path(
    os.environ.get("PREFILLSCOPE_TARGETS_DIR", "~/.cache/prefillscope-targets")
).expanduser()
#: Seconds between SIGTERM and SIGKILL, as in the target scripts' ``stop``.
STOP_GRACE_S = 15.0
LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class TargetServer:
    """A running target: where it listens and where its output goes."""

    url: str
    port: int
    log: Path
    label: str = "target"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if not self.log.exists():
            return f"(no log at {self.log})"
        tail = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"last {len(tail)} lines of {self.log}:\n" + "\n".join(tail)


def _wait_healthy(
    server: TargetServer, process: subprocess.Popen[bytes], script: str, startup_s: float
) -> None:
    """Return once ``/health`` answers 200; fail with the log's tail if it never does."""
    started = time.monotonic()
    while time.monotonic() - started < startup_s:
        if process.poll() is not None:
            pytest.fail(
                f"the {server.label} target exited ({process.returncode}) before it was "
                f"healthy; run `bash targets/{script} setup` if it is not installed\n"
                + server.log_tail(),
                pytrace=False,
            )
        try:
            if httpx.get(f"{server.url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(
        f"the {server.label} target was not healthy after {startup_s:.0f} s\n" + server.log_tail(),
        pytrace=False,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, then SIGKILL it if it outlives the grace."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def installed_model(target: str, model: str) -> Path:
    """The folder of ``model`` as the ``target`` script's ``setup`` built it."""
    return TARGETS_DIR / target / "models" / model


@dataclass(frozen=True)
class Start:
    """One server of a target script to start: its label, log file and ``env`` added."""

    label: str
    log: Path
    env: Mapping[str, str]


@contextmanager
def targets(script: str, starts: Sequence[Start], startup_s: float) -> Iterator[list[TargetServer]]:
    """The target script ``script``'s ``run``, once per ``starts`` item, each on a free
    port, all started before any is waited on (their start-ups overlap: a vLLM start is
    35-80 s, mostly imports and waits), all stopped on exit."""
    with ExitStack() as stack:
        started = []
        for start in starts:
            port = free_port()
            server = TargetServer(f"http://127.0.0.1:{port}", port, start.log, start.label)
            with start.log.open("wb") as out:
                process = subprocess.Popen(
                    # exec'd down to the server itself, which then gets SIGTERM if the tests die
                    dying_with_us(["bash", str(TARGETS / script), "run"]),
                    env=os.environ | {"PORT": str(port), **start.env},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    process_group=0,  # not a new session: that would be its own scheduler autogroup
                )
            stack.callback(stop, process)
            started.append((server, process))
        t0 = time.monotonic()
        for server, process in started:
            _wait_healthy(server, process, script, startup_s)
            took = time.monotonic() - t0
            print(f"\n{server.label} target healthy on {server.url} after {took:.0f} s")
        yield [server for server, _ in started]


@contextmanager
def target(
    script: str, label: str, log: Path, env: Mapping[str, str], startup_s: float
) -> Iterator[TargetServer]:
    """The target script ``script``'s ``run`` on a free port with ``env`` added, stopped on exit."""
    with targets(script, [Start(label, log, env)], startup_s) as (server,):
        yield server


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A failed test that used a target (its server fixture, or the URL fixture that
    depends on it) gets the server log's tail in its report."""
    report = yield
    if report.failed:
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, TargetServer):
                report.sections.append((f"{value.label} target log", value.log_tail()))
    return report
