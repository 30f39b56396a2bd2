"""``ab.json``'s ``servers``: the servers an A/B launched (``--launch``), one record each.

``session.launcher`` says how each went away (``ServerStop``); ``session.ab_servers``
records each server as it is stopped and ``session.ab_runner`` writes them, its command
redacted (``runtime.redact``), in ``ab.json`` (``runfmt.abresult``). A key a newer writer
adds is kept in ``extra``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runfmt.codec import EMPTY


@dataclass(frozen=True)
class ServerStop:
    """How a server went away: ``how`` (``exited`` before it was stopped, ``sigterm``,
    ``sigkill``, or ``never started``), its exit status (``null`` when unknown) and the
    seconds the stop took."""

    how: str = ""
    returncode: int | None = None
    seconds: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class ServerRecord:
    """One launched server: its name, command line, URL, log file, process id (``null``
    when it never started), the seconds it took to become healthy (``null`` when it did
    not) and how it stopped."""

    name: str = ""
    command: tuple[str, ...] = ()
    url: str = ""
    log: str = ""
    pid: int | None = None
    ready_s: float | None = None
    stopped: ServerStop = field(default_factory=ServerStop)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)
