"""Shared test fixtures: paths to the real captures and targets kept in the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

#: The session-wide vLLM target fixture (``vllm_server``, ``vllm_url``) for real_vllm tests.
pytest_plugins = ["real_vllm"]

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
TARGETS = ROOT / "targets"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """Real /metrics expositions, SSE streams, error bodies and traces (see their SOURCES.md)."""
    return FIXTURES
