"""``run.json``: what a bench run was, written when it starts and again when it ends.

Written first with ``status: running`` before anything is sent, so that a run killed
outright still says what it was; rewritten at the end with its status (``complete``,
``interrupted``, ``failed``), the reason and the load generator's account. The contract
is DESIGN.md §4.1; ``diagnose compare`` requires ``workload`` (the spec, seed included)
and ``probes.server_metrics`` tells the timeline which mapping read the scrapes.

Secrets never get here: the target's description leaves out the API key, and the
command line is stored with the key's value (and any password in a URL) replaced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from runtime.version import package_version

REDACTED = "REDACTED"
#: Flags whose value is a secret, in ``--flag VALUE`` or ``--flag=VALUE`` form.
SECRET_FLAGS = ("--api-key",)
_URL_PASSWORD = re.compile(r"(://[^/:@\s]+:)[^/@\s]+@")


def redact_command(argv: Sequence[str], secrets: Iterable[str | None] = ()) -> list[str]:
    """``argv`` with secret flag values, the given secrets and URL passwords replaced."""
    known = [s for s in secrets if s]
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, sep, _ = arg.partition("=")
        if flag in SECRET_FLAGS:
            if sep:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        for secret in known:
            arg = arg.replace(secret, REDACTED)
        out.append(_URL_PASSWORD.sub(rf"\1{REDACTED}@", arg))
    return out


def iso(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds")


@dataclass
class RunInfo:
    """The pieces of ``run.json``, filled in as the run goes."""

    command: list[str]
    wall_t0: float
    target: dict[str, Any]
    workload: dict[str, Any]
    plan: dict[str, Any]
    load: dict[str, Any]
    oracle: dict[str, Any]
    slo: dict[str, Any] | None = None
    probes: dict[str, Any] = field(default_factory=dict)
    cache_protocol: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None

    def to_json(self, status: str, reason: str | None = None, ended_wall: float | None = None):
        """The document for ``status``; ``ended_wall`` (Unix time) once the run is over."""
        doc: dict[str, Any] = {
            "tool": "prefillscope",
            "tool_version": package_version(),
            "command": self.command,
            "status": status,
            "reason": reason,
            "clock": {"wall_t0": self.wall_t0, "started_at": iso(self.wall_t0)},
            "target": self.target,
            "workload": self.workload,
            "seed": self.workload.get("seed"),
            "plan": self.plan,
            "load": self.load,
            "oracle": self.oracle,
            "slo": self.slo,
            "probes": self.probes,
            "cache_protocol": self.cache_protocol,
            "result": self.result,
        }
        if ended_wall is not None:
            doc["clock"]["ended_at"] = iso(ended_wall)
            doc["duration_s"] = ended_wall - self.wall_t0
        return doc
