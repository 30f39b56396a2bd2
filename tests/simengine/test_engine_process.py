"""The embedded engine in a child process: what bench measures by default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from perfmodel.config import EngineConfig
from simengine.engine_process import EngineProcess
from workloads.errors import InputError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_serves_from_its_own_process_and_stops() -> None:
    with EngineProcess(EngineConfig(num_gpu_blocks=777, fixed_step_s=0.001)) as engine:
        assert engine.num_gpu_blocks == 777
        pid = engine._proc.pid  # type: ignore[union-attr]
        assert pid != os.getpid()
        body = {"prompt": [300, 301, 302], "max_tokens": 3, "ignore_eos": True}
        done = httpx.post(f"{engine.url}/v1/completions", json=body, timeout=10).json()
        assert done["usage"]["completion_tokens"] == 3
    assert _wait_gone(pid)


def test_a_configuration_the_child_refuses_is_a_one_line_input_error() -> None:
    # 1e12 parameters cannot fit an 80 GB GPU: the child finds out when it sizes the pool.
    config = EngineConfig(model="custom:params=1e12,layers=32,q_heads=32,kv_heads=8,head_dim=128")
    with pytest.raises(InputError):
        EngineProcess(config).start()


def test_the_engine_dies_with_its_parent() -> None:
    """A bench that is SIGKILLed must not leave an engine serving behind it."""
    script = (
        "from simengine.engine_process import EngineProcess\n"
        "e = EngineProcess().start()\n"
        "print(e._proc.pid, flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert _wait_gone(child)
