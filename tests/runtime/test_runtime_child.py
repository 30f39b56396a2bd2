"""runtime.child: the JSON-line handshake and the SIGTERM-then-SIGKILL stop, on real children."""

from __future__ import annotations

import subprocess
import sys
import time

from runtime.child import read_message, stop_process

IGNORES_SIGTERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def _popen(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def test_a_child_that_ends_on_sigterm_is_not_killed() -> None:
    proc = _popen("import time; print('{\"ready\": 1}', flush=True); time.sleep(60)")
    assert read_message(proc, 30) == {"ready": 1}
    assert stop_process(proc, 30) is False
    assert proc.returncode == -15


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    proc = _popen(IGNORES_SIGTERM)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    began = time.monotonic()
    assert stop_process(proc, 0.5) is True
    assert proc.returncode == -9
    assert time.monotonic() - began >= 0.5


def test_no_message_from_a_child_that_exits_or_says_no_json() -> None:
    talker = _popen("print('not json')")
    assert read_message(talker, 30) is None
    assert talker.wait(30) == 0
    silent = _popen("import sys; sys.exit(3)")
    assert read_message(silent, 30) is None
    assert stop_process(silent, 1) is False
    assert silent.returncode == 3
