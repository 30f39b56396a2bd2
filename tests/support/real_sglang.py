"""The real SGLang CPU target for the ``real_sglang`` tests: one server per test session.

SGLang 0.5.23 takes 70–120 s to start on a 2-core machine (its CPU engine, the
``torch_native`` attention backend, prefillscope's import-only ``sgl_kernel`` stand-in:
``targets/sglang-cpu.sh``), so every ``real_sglang`` test that needs a plain server shares
the one the session-scoped ``sglang_server`` fixture starts: the target script's ``run``
on a free port, through ``target_server`` (its own process group, ``/health``, SIGTERM
then SIGKILL, the log's tail on failure). Loaded as a plugin by ``conftest.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from target_server import TargetServer, installed_model, target

#: Seconds to wait for /health (pytest-timeout's 300 s per test counts fixture setup).
STARTUP_S = 280.0
#: The target's model and the facts the tests check against (the same tiny Llama as the
#: vLLM target's; SGLang's radix cache matches token by token at page size 1).
MODEL = "tiny-llama"
VOCAB_SIZE = 8192
MAX_MODEL_LEN = 4096
PAGE_SIZE = 1
CHUNK = 512
#: The served model's folder, where the target script's ``setup`` built it.
MODEL_DIR = installed_model("sglang", MODEL)


@contextmanager
def sglang_target(log: Path, chunk: int = CHUNK) -> Iterator[TargetServer]:
    """The SGLang CPU target on a free port at ``--chunked-prefill-size chunk``."""
    env = {"CHUNK": str(chunk), "PAGE_SIZE": str(PAGE_SIZE)}
    with target("sglang-cpu.sh", "SGLang", log, env, STARTUP_S) as server:
        yield server


@pytest.fixture(scope="session")
def sglang_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TargetServer]:
    """The SGLang CPU target, started once for the session."""
    with sglang_target(tmp_path_factory.mktemp("sglang-target") / "server.log") as server:
        yield server


@pytest.fixture(scope="session")
def sglang_url(sglang_server: TargetServer) -> str:
    """The shared SGLang target's base URL."""
    return sglang_server.url
