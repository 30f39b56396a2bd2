"""The real vLLM CPU target for the ``real_vllm`` tests: one server per test session.

vLLM takes 35–80 s to start on a 2-core machine, so every ``real_vllm`` test that needs a
plain server shares the one the session-scoped ``vllm_server`` fixture starts: the
target script's ``run`` (``targets/vllm-cpu.sh``, installed by its ``setup``) on a free
port, in its own process group so that the API server, its EngineCore and the workers go
together (not in a new session: Linux's autogroup scheduling would then give vLLM's busy
workers as much CPU as every other process of the session together, and starve the
client processes the tests start), waited on ``/health`` with a generous timeout, and
stopped with SIGTERM, then SIGKILL (vLLM 0.32 may not exit on SIGTERM with a stream open).
It dies with the test process however that ends: a SIGTERM or SIGHUP to pytest tears the
fixture down (``conftest``), and a SIGKILL makes the kernel SIGTERM vLLM
(``runtime.lifetime.dying_with_us``).

The server's output goes to a log file kept under pytest's base temp folder; its tail is
the failure message when the server does not come up, and is added to the report of any
test using the server that fails. Loaded as a plugin by ``conftest.py``, so the fixture
is one object for the whole session, not one per importing module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from probe_servers import free_port
from repo_paths import TARGETS

from runtime.lifetime import dying_with_us

#: Seconds to wait for /health: 35–80 s is usual, a loaded 2-core machine may take more.
#: Under pytest-timeout's 300 s per test (which counts fixture setup), so that a server
#: that never comes up fails with its log's tail rather than a timeout's stack dump.
STARTUP_S = 240.0
#: Seconds between SIGTERM and SIGKILL, as in the target script's ``stop``.
STOP_GRACE_S = 15.0
#: The target's model and the facts the tests check against.
MODEL = "tiny-llama"
VOCAB_SIZE = 8192
BLOCK_SIZE = 128
MAX_MODEL_LEN = 4096
LOG_TAIL_LINES = 40
#: The served model's folder, where the target script's ``setup`` built it.
MODEL_DIR = (
    Path(os.environ.get("PREFILLSCOPE_TARGETS_DIR", "~/.cache/prefillscope-targets")).expanduser()
    / "vllm"
    / "models"
    / MODEL
)


@dataclass(frozen=True)
class VllmServer:
    """A running vLLM target: where it listens and where its output goes."""

    url: str
    port: int
    log: Path

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if not self.log.exists():
            return f"(no log at {self.log})"
        tail = self.log.read_text(errors="replace").splitlines()[-lines:]
        return f"last {len(tail)} lines of {self.log}:\n" + "\n".join(tail)


def _wait_healthy(server: VllmServer, process: subprocess.Popen[bytes]) -> None:
    """Return once ``/health`` answers 200; fail with the log's tail if it never does."""
    started = time.monotonic()
    while time.monotonic() - started < STARTUP_S:
        if process.poll() is not None:
            pytest.fail(
                f"the vLLM target exited ({process.returncode}) before it was healthy; "
                f"run `bash targets/vllm-cpu.sh setup` if it is not installed\n"
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
        f"the vLLM target was not healthy after {STARTUP_S:.0f} s\n" + server.log_tail(),
        pytrace=False,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
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


@contextmanager
def vllm_target(log: Path, max_batched: int = 512) -> Iterator[VllmServer]:
    """The vLLM CPU target on a free port (``EAGER=1``: no compile wait) at a chunk
    budget of ``max_batched`` tokens, stopped on exit."""
    port = free_port()
    server = VllmServer(f"http://127.0.0.1:{port}", port, log)
    env = os.environ | {"PORT": str(port), "EAGER": "1", "MAX_BATCHED": str(max_batched)}
    with log.open("wb") as out:
        process = subprocess.Popen(
            # exec'd down to vLLM itself, which then gets SIGTERM if the tests die
            dying_with_us(["bash", str(TARGETS / "vllm-cpu.sh"), "run"]),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            process_group=0,  # not a new session: that would be its own scheduler autogroup
        )
    try:
        t0 = time.monotonic()
        _wait_healthy(server, process)
        print(f"\nvLLM target healthy on {server.url} after {time.monotonic() - t0:.0f} s")
        yield server
    finally:
        _stop(process)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The vLLM CPU target, started once for the session."""
    with vllm_target(tmp_path_factory.mktemp("vllm-target") / "server.log") as server:
        yield server


@pytest.fixture(scope="session")
def vllm_url(vllm_server: VllmServer) -> str:
    """The shared vLLM target's base URL."""
    return vllm_server.url


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A failed test that used the server gets the server log's tail in its report."""
    report = yield
    server = getattr(item, "funcargs", {}).get("vllm_server")  # also there for vllm_url
    if report.failed and isinstance(server, VllmServer):
        report.sections.append(("vLLM target log", server.log_tail()))
    return report
