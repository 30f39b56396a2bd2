"""The real vLLM CPU target for the ``real_vllm`` tests: one server per test session.

vLLM takes 35–80 s to start on a 2-core machine, so every ``real_vllm`` test that needs a
plain server shares the one the session-scoped ``vllm_server`` fixture starts: the
target script's ``run`` (``targets/vllm-cpu.sh``, installed by its ``setup``) on a free
port, in its own process group so that the API server, its EngineCore and the workers go
together, waited on ``/health`` with a generous timeout, and stopped with SIGTERM, then
SIGKILL (vLLM 0.32 may not exit on SIGTERM with a stream open): ``target_server``. The
server's output goes to a log file kept under pytest's base temp folder. Loaded as a
plugin by ``conftest.py``, so the fixture is one object for the whole session, not one
per importing module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from target_server import TargetServer, installed_model, target

#: Seconds to wait for /health: 35–80 s is usual, a loaded 2-core machine may take more.
#: Under pytest-timeout's 300 s per test (which counts fixture setup), so that a server
#: that never comes up fails with its log's tail rather than a timeout's stack dump.
STARTUP_S = 240.0
#: The target's model and the facts the tests check against.
MODEL = "tiny-llama"
VOCAB_SIZE = 8192
BLOCK_SIZE = 128
MAX_MODEL_LEN = 4096
#: The served model's folder, where the target script's ``setup`` built it.
MODEL_DIR = installed_model("vllm", MODEL)
#: A running vLLM target (the name the tests import).
VllmServer = TargetServer


@contextmanager
def vllm_target(log: Path, max_batched: int = 512) -> Iterator[TargetServer]:
    """The vLLM CPU target on a free port (``EAGER=1``: no compile wait) at a chunk
    budget of ``max_batched`` tokens, stopped on exit."""
    env = {"EAGER": "1", "MAX_BATCHED": str(max_batched)}
    with target("vllm-cpu.sh", "vLLM", log, env, STARTUP_S) as server:
        yield server


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TargetServer]:
    """The vLLM CPU target, started once for the session."""
    with vllm_target(tmp_path_factory.mktemp("vllm-target") / "server.log") as server:
        yield server


@pytest.fixture(scope="session")
def vllm_url(vllm_server: TargetServer) -> str:
    """The shared vLLM target's base URL."""
    return vllm_server.url
