"""The one error type for bad user input, shared by every package.

It lives in the lowest package so that workloads, the load generator, the probes and
the engine can all raise it; the CLI turns it into a single line and exit status 2
instead of a traceback. The message names the field and says how to fix it.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input from a user: a flag, a spec file, a trace line, an unreachable endpoint."""

    def __init__(self, field: str, problem: str, fix: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        text = f"{field}: {problem}"
        if fix:
            text += f" ({fix})"
        super().__init__(text)
