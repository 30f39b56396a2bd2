"""A helper process that must not outlive the run that started it.

``bench`` runs the embedded engine (``simengine.engine_process``) and the probes
(``probes.probe_process``) as children. A bench that crashes or is killed with SIGKILL
runs no clean-up, so each child asks the kernel to end it instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal

#: ``prctl`` option: the signal this process gets when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when the thread that started it ends (the
    parent must start it from a thread that lives as long as the run); a no-op where
    ``prctl`` does not exist."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
