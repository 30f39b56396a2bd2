"""Shared test fixtures: paths to the real captures and targets kept in the repository."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from repo_paths import FIXTURES

# A shell without job control starts background commands with SIGINT ignored, and every
# process the tests start (servers, the CLI) would inherit that and shrug off the Ctrl-C
# the interruption tests send. Handling it here, as an interactive pytest does, gives
# those children SIGINT's default on exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _stop_session(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"pytest got {signal.Signals(signum).name}")


# A CI cancel (SIGTERM) or a closed terminal (SIGHUP) ends the session as Ctrl-C does:
# pytest then tears its fixtures down, and the servers they started are stopped with it
# (a SIGKILL, which runs no teardown, is covered by ``runtime.lifetime.dying_with_us``).
# Handled even when inherited ignored (``nohup``), as SIGINT above, so that the processes
# the signal tests start get the signals' defaults.
for _sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(_sig, _stop_session)

#: The session-wide real-target fixtures: ``vllm_server``, ``vllm_url`` (real_vllm tests)
#: and ``sglang_server``, ``sglang_url`` (real_sglang tests); a failed test that used one
#: gets its server log's tail (``target_server``).
pytest_plugins = ["target_server", "real_vllm", "real_sglang"]


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """Real /metrics expositions, SSE streams, error bodies and traces (see their SOURCES.md)."""
    return FIXTURES
