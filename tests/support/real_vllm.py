"""The real vLLM CPU target for the ``real_vllm`` tests: one server per test session.

vLLM takes 35–80 s to start on a 2-core machine, so every ``real_vllm`` test that needs a
plain server shares the one the session-scoped ``vllm_server`` fixture starts: the
target script's ``run`` (``targets/vllm-cpu.sh``, installed by its ``setup``) on a free
port, in its own process group so that the API server, its EngineCore and the workers go
together, waited on ``/health`` with a generous timeout, and stopped with SIGTERM, then
SIGKILL (vLLM 0.32 may not exit on SIGTERM with a stream open): ``target_server``. The
server's output goes to a log file kept under pytest's base temp folder. When the
calibration's test is selected, a second server at another chunk budget starts beside
the first (``vllm_holdout_server``). Loaded as a
plugin by ``conftest.py``, so the fixture is one object for the whole session, not one
per importing module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from target_server import Start, TargetServer, installed_model, targets

#: Seconds to wait for /health: 35–80 s is usual, a loaded 2-core machine may take more.
#: Under pytest-timeout's 300 s per test (which counts fixture setup), so that a server
#: that never comes up fails with its log's tail rather than a timeout's stack dump.
STARTUP_S = 240.0
#: The target's model and the facts the tests check against.
MODEL = "tiny-llama"
VOCAB_SIZE = 8192
BLOCK_SIZE = 128
MAX_MODEL_LEN = 4096
#: The shared target's chunk budget (the target script's default), and a second
#: target's, for the calibration's held-out runs (``vllm_holdout_server``).
MAX_BATCHED = 512
HOLDOUT_BATCHED = 128
#: The served model's folder, where the target script's ``setup`` built it.
MODEL_DIR = installed_model("vllm", MODEL)
#: A running vLLM target (the name the tests import).
VllmServer = TargetServer


def _start(log: Path, max_batched: int) -> Start:
    """The vLLM CPU target (``EAGER=1``: no compile wait) at a chunk budget of
    ``max_batched`` tokens, logging to ``log``."""
    label = "vLLM" if max_batched == MAX_BATCHED else f"vLLM (budget {max_batched})"
    return Start(label, log, {"EAGER": "1", "MAX_BATCHED": str(max_batched)})


@contextmanager
def vllm_target(log: Path, max_batched: int = MAX_BATCHED) -> Iterator[TargetServer]:
    """The vLLM CPU target on a free port at a chunk budget of ``max_batched`` tokens,
    stopped on exit."""
    with targets("vllm-cpu.sh", [_start(log, max_batched)], STARTUP_S) as (server,):
        yield server


@pytest.fixture(scope="session")
def _vllm_servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[int, TargetServer]]:
    """The session's vLLM targets by chunk budget: ``MAX_BATCHED``, and
    ``HOLDOUT_BATCHED`` too when a selected test asks for it (``vllm_holdout_server``),
    started together so that the second start-up overlaps the first instead of following
    it. An idle vLLM waits on its queue: the second costs the other tests nothing."""
    budgets = [MAX_BATCHED]
    if any("vllm_holdout_server" in item.fixturenames for item in request.session.items):
        budgets.append(HOLDOUT_BATCHED)
    folder = tmp_path_factory.mktemp("vllm-target")
    starts = [_start(folder / f"server-{b}.log", b) for b in budgets]
    with targets("vllm-cpu.sh", starts, STARTUP_S) as servers:
        yield dict(zip(budgets, servers, strict=True))


@pytest.fixture(scope="session")
def vllm_server(_vllm_servers: dict[int, TargetServer]) -> TargetServer:
    """The vLLM CPU target at ``MAX_BATCHED``, started once for the session."""
    return _vllm_servers[MAX_BATCHED]


@pytest.fixture(scope="session")
def vllm_url(vllm_server: TargetServer) -> str:
    """The shared vLLM target's base URL."""
    return vllm_server.url


@pytest.fixture(scope="session")
def vllm_holdout_server(_vllm_servers: dict[int, TargetServer]) -> TargetServer:
    """A second vLLM CPU target at ``HOLDOUT_BATCHED``, started with the first."""
    return _vllm_servers[HOLDOUT_BATCHED]
