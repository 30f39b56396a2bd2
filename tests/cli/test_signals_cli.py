"""SIGTERM and SIGHUP stop any command as Ctrl-C does: one line, exit 128 + the signal.

The signal is real (``os.kill`` of the process itself), delivered at a set point: while
the CLI loads, or inside a command (``calc chunks``, whose arithmetic module is imported
when it runs). Long commands (``bench``, ``diagnose ab``) have their own tests
(``test_bench_interrupt``, ``test_ab_signals``).
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

CODE = """
import os, signal, sys
class SignalOnImport:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            os.kill(os.getpid(), {signum})
        return None
from prefillscope.cli import main
sys.meta_path.insert(0, SignalOnImport())
sys.argv = ["prefillscope", "calc", "chunks", "--budget", "8", "--prompt", "16"]
main()
"""


@pytest.mark.parametrize("module", ["prefillscope.app", "diagnose.arithmetic"])
@pytest.mark.parametrize(
    ("sig", "status", "line"),
    [
        (signal.SIGTERM, 143, "prefillscope: error: interrupted (SIGTERM)\n"),
        (signal.SIGHUP, 129, "prefillscope: error: interrupted (SIGHUP)\n"),
    ],
)
def test_a_stop_signal_is_one_line_and_128_plus_the_signal(
    module: str, sig: signal.Signals, status: int, line: str
) -> None:
    code = CODE.format(module=module, signum=int(sig))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (status, line)
    assert done.stdout == ""


def test_a_signal_ignored_at_start_stays_ignored() -> None:
    """``nohup`` starts a command with SIGHUP ignored: it keeps running and finishes."""
    code = CODE.format(module="diagnose.arithmetic", signum=int(signal.SIGHUP))
    ignored = "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN)\n" + code
    done = subprocess.run(
        [sys.executable, "-c", ignored], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "16" in done.stdout
