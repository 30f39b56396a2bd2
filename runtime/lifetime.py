"""A helper process that must not outlive the run that started it.

``bench`` runs the embedded engine (``simengine.engine_process``) and the probes
(``probes.probe_process``) as children. A bench that crashes or is killed with SIGKILL
runs no clean-up, so each child asks the kernel to end it instead; a command we launch
(``diagnose ab --launch``) is started through ``dying_with_us`` for the same reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import signal

#: ``prctl`` option: the signal this process gets when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1
#: util-linux's ``setpriv`` (Linux), which can set the parent-death signal of a command.
SETPRIV = shutil.which("setpriv")


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when the thread that started it ends (the
    parent must start it from a thread that lives as long as the run); a no-op where
    ``prctl`` does not exist."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def dying_with_us(argv: list[str]) -> list[str]:
    """``argv`` run so that the kernel sends it SIGTERM when this process dies — killed
    outright (SIGKILL) included, when no clean-up of ours runs: ``prctl(PR_SET_PDEATHSIG)``
    through ``setpriv``, kept across ``exec`` (a ``preexec_fn`` could deadlock in a
    threaded parent). Start it from a thread that lives as long as the process (the main
    thread): the signal follows the death of the thread that started it. Unchanged where
    ``setpriv`` is missing."""
    return [SETPRIV, "--pdeathsig", "TERM", "--", *argv] if SETPRIV else list(argv)
