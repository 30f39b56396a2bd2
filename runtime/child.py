"""Helper child processes: one JSON line per message on stdout, a graceful stop.

The embedded engine (``simengine.engine_process``) and the probes
(``probes.probe_process``) run as ``python -m`` children of a bench. Both speak the same
handshake: the parent writes the configuration as JSON on the child's stdin, the child
answers with one JSON line on stdout once it is ready (and the probes with one more when
they stop). Both ignore SIGINT and SIGHUP, since Ctrl-C and a closed terminal reach the
whole process group and the parent decides how a run ends, and both die with their parent.
"""

from __future__ import annotations

import json
import selectors
import signal
import subprocess
import sys
from typing import Any

from runtime.lifetime import die_with_parent


def become_child() -> None:
    """Set up a helper child: SIGINT and SIGHUP ignored (the parent decides how the run
    ends) and SIGTERM from the kernel when the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    die_with_parent()


def say(message: dict[str, Any]) -> None:
    """Send one message to the parent (the child's side): a JSON line on stdout."""
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def read_message(proc: subprocess.Popen[Any], timeout_s: float) -> dict[str, Any] | None:
    """The child's next JSON line (the parent's side); None when it exited, stayed silent
    for ``timeout_s`` or said something that is not JSON."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        line = proc.stdout.readline() if sel.select(timeout_s) else ""
    try:
        return json.loads(line) if line else None
    except json.JSONDecodeError:
        return None


def stop_process(proc: subprocess.Popen[Any], grace_s: float, *, terminate: bool = True) -> bool:
    """SIGTERM ``proc`` (unless ``terminate`` is False: it was already asked to stop some
    other way), give it ``grace_s`` to exit, then SIGKILL it; reaped either way. Whether it
    had to be killed."""
    if proc.poll() is not None:
        return False
    if terminate:
        proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return True
    return False
