"""How a bench run's end maps onto the command's exit status (README: "Exit status").

========  ==============================================================================
0         complete, and the requests went well enough
1         failed: the tool's own stop (an unexpected error, recorded in ``run.json``)
2         bad input: one line naming the flag, nothing sent (``workloads.errors.InputError``)
3         interrupted: the server stopped answering mid-run (every finished request kept)
4         requests failed: none succeeded, or a larger share failed than ``--max-error-rate``
5         SLO breached: a smaller share of requests met ``--slo`` than ``--min-goodput``
6         write failed: the run directory could not be written (``no space left on DIR``)
130/143   stopped by Ctrl-C / SIGTERM (129 for SIGHUP): ``runtime.signals``
========  ==============================================================================

A run can be ``complete`` — every request sent and answered — and still be useless: a
server that answers every request with HTTP 5xx, a malformed stream or "prompt too
long". Exit 4 is for CI: the run's files are written as usual, and one line on stderr
gives the failed share and the server's most common message. Exit 5 is the same for
latency: the requests were answered, but too few of them within the SLO (one line names
the SLO and the share that met it). Exit 4 wins when both apply. Exit 6 is a run stopped
because its own files could not be written (the disk full, the folder made read-only):
the load stopped at the first failed write, and the one line says how many of the
finished requests were kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.load_options import LoadResult
from runfmt.summary import Summary
from runtime import signals
from runtime.atomic import EXIT_WRITE_FAILED
from workloads.errors import InputError

EXIT_COMPLETE, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_REQUESTS_FAILED = 0, 1, 3, 4
EXIT_SLO_BREACHED = 5
#: Characters of a server's error message quoted on the one line.
MESSAGE_CHARS = 300


def check_max_error_rate(value: float | None) -> float | None:
    """``--max-error-rate``: a fraction of the measured requests, 0 to 1."""
    if value is not None and not (math.isfinite(value) and 0 <= value <= 1):
        raise InputError(
            "--max-error-rate", f"{value:g} is not a fraction in [0, 1]", "e.g. 0.01 for 1 %"
        )
    return value


def check_min_goodput(value: float | None, slo_given: bool) -> float | None:
    """``--min-goodput``: the share of measured requests that must meet ``--slo``, 0 to 1."""
    if value is None:
        return None
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise InputError(
            "--min-goodput", f"{value:g} is not a share in [0, 1]", "e.g. 0.9 for 90 %"
        )
    if not slo_given:
        raise InputError("--min-goodput", "needs an SLO to meet", "add e.g. --slo ttft=500")
    return value


def slo_breach(summary: Summary, min_goodput: float | None) -> str | None:
    """Why the run breaches its SLO (one line naming the SLO and the share), else ``None``."""
    goodput = summary.goodput
    share = goodput.share if goodput is not None else None
    if goodput is None or min_goodput is None or share is None or share >= min_goodput:
        return None
    slo = ",".join(f"{k.removesuffix('_s')}={v * 1e3:g}ms" for k, v in goodput.slo.bounds())
    good, total = goodput.requests, summary.requests.total
    return (
        f"{good} of {total} requests ({share:.1%}) met the SLO {slo}, "
        f"below --min-goodput {min_goodput:g}"
    )


def top_message(summary: Summary) -> str:
    """``"<count>× <class>: <message>"`` for the most common error message, or ``""``."""
    messages = summary.error_messages
    if not messages:
        return ""
    top = messages[0]
    text = " ".join(top.message.split())
    if len(text) > MESSAGE_CHARS:
        text = text[: MESSAGE_CHARS - 1] + "…"
    return f"{top.count}× {top.kind}: {text}"


def requests_failure(summary: Summary, max_error_rate: float | None) -> str | None:
    """Why the run's requests make it exit 4 (one line), else ``None``."""
    counts = summary.requests
    total, ok = int(counts.total or 0), int(counts.completed or 0)
    failed = total - ok
    if total == 0:
        return None
    if ok == 0:
        problem = f"no request succeeded ({failed} of {total} failed)"
    elif max_error_rate is not None and failed / total > max_error_rate:
        problem = (
            f"{failed} of {total} requests failed ({failed / total:.1%}), "
            f"more than --max-error-rate {max_error_rate:g}"
        )
    else:
        return None
    message = top_message(summary)
    return f"{problem}; most common error: {message}" if message else problem


def exit_status(
    status: str,
    summary: Summary,
    max_error_rate: float | None,
    min_goodput: float | None = None,
) -> int:
    """The exit status of a run that was not stopped by a signal."""
    if status == "interrupted":
        return EXIT_INTERRUPTED
    if status != "complete":
        return EXIT_FAILED
    if requests_failure(summary, max_error_rate):
        return EXIT_REQUESTS_FAILED
    return EXIT_SLO_BREACHED if slo_breach(summary, min_goodput) else EXIT_COMPLETE


@dataclass
class BenchOutcome:
    """How a run ended and where it is."""

    run_dir: Path
    status: str
    reason: str | None
    summary: Summary
    result: LoadResult
    cancelled: bool = False
    max_error_rate: float | None = None
    min_goodput: float | None = None
    #: Why a write to the run directory failed (``no space left on DIR``), if one did.
    write_failure: str | None = None
    #: The run's documents (``run.json``, ``summary.json``) that could not be written.
    unwritten: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """``session.exit_status``'s table; a run stopped by a signal exits 128 + signum."""
        if self.cancelled:
            return signals.stop_exit_code()
        if self.write_failure is not None:
            return EXIT_WRITE_FAILED
        return exit_status(self.status, self.summary, self.max_error_rate, self.min_goodput)

    @property
    def usage_warning(self) -> str | None:
        """One line when the server reported usage that cannot be right, else ``None``."""
        suspect = self.summary.usage_suspect
        if not suspect.requests:
            return None
        kinds = ", ".join(f"{kind} ×{n}" for kind, n in suspect.kinds.items())
        return (
            f"{suspect.requests} of {suspect.of} completed requests carry impossible "
            f"usage from the server ({kinds}): kept as reported, flagged usage_suspect in "
            f"requests, left out of the prefix hit rates (a negative token count out of "
            f"the throughput too); {self.run_dir}"
        )

    def ending(self) -> str:
        """The one line for a run that did not complete: its status, its reason, and the
        requests kept (of those finished, when a failed write kept fewer)."""
        result = self.result
        head = f"run {self.status}: {self.reason}"
        if self.write_failure is None:
            return (
                f"{head}; {result.ok} completed and {result.finished - result.ok} failed "
                f"requests kept in {self.run_dir}"
            )
        counts = self.summary.requests
        kept = int(counts.total or 0) + int(counts.warmup_excluded or 0)
        line = f"{head}; {kept} of {result.finished} finished requests kept in {self.run_dir}"
        if self.unwritten:
            line += f" ({' and '.join(self.unwritten)} not written)"
        return line

    @property
    def requests_failure(self) -> str | None:
        """Why the requests make the run exit 4 (one line), else ``None``."""
        if self.cancelled or self.status != "complete":
            return None
        return requests_failure(self.summary, self.max_error_rate)

    @property
    def slo_breach(self) -> str | None:
        """Why the run exits 5 (one line), else ``None`` (also when it exits 4 instead)."""
        if self.cancelled or self.status != "complete" or self.requests_failure:
            return None
        return slo_breach(self.summary, self.min_goodput)
