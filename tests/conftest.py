"""Shared test fixtures: paths to the real captures and targets kept in the repository."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

# A shell without job control starts background commands with SIGINT ignored, and every
# process the tests start (servers, the CLI) would inherit that and shrug off the Ctrl-C
# the interruption tests send. Handling it here, as an interactive pytest does, gives
# those children SIGINT's default on exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: The session-wide vLLM target fixture (``vllm_server``, ``vllm_url``) for real_vllm tests.
pytest_plugins = ["real_vllm"]

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
TARGETS = ROOT / "targets"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """Real /metrics expositions, SSE streams, error bodies and traces (see their SOURCES.md)."""
    return FIXTURES
