"""Servers the tests start die with the test process, however it ends.

A pytest session runs a module with a session-scoped server fixture (the pattern of the
real vLLM target's) and a test that hangs; it is then ended with SIGTERM (a CI cancel:
the fixture is torn down, ``conftest``), SIGHUP, or SIGKILL (no teardown at all: the
kernel's parent-death signal, ``runtime.lifetime.dying_with_us``). The server's PID must
be gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from repo_paths import ROOT, SUPPORT

MODULE = """
import os, signal, subprocess, sys, time
import pytest
from runtime.lifetime import dying_with_us

@pytest.fixture(scope="session")
def server():
    argv = [sys.executable, "-c", "import time; time.sleep(600)"]
    process = subprocess.Popen(dying_with_us(argv), process_group=0)
    yield process
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()

def test_hangs(server):
    with open(os.environ["PID_FILE"], "w") as fh:
        fh.write(str(server.pid))
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_a_server_started_by_tests_dies_with_them(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "test_hang.py").write_text(MODULE)
    pid_file = tmp_path / "pid"
    env = os.environ | {
        "PID_FILE": str(pid_file),
        "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{SUPPORT}",
    }
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_hang.py")],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert session.poll() is None, session.communicate()[0]
            assert time.monotonic() < deadline, "the inner session never started its test"
            time.sleep(0.05)
        server = int(pid_file.read_text())
        assert alive(server)
        session.send_signal(sig)
        session.communicate(timeout=60)
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    deadline = time.monotonic() + 10
    while alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(server), f"the server {server} outlived a {sig.name} to pytest"
