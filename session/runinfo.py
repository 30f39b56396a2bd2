"""The command line a run records (``run.json``, ``ab.json``), secrets replaced.

Secrets never get into a run directory: the target's description leaves out the API key,
and the command line is stored with the key's value (and any password in a URL) replaced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

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
