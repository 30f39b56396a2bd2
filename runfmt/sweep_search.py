"""``sweep.json``'s ``search``: an SLA search's bounds, probes and answer, typed.

``sweep --find "ttft_p99<500ms"`` (``session.sla_search``) writes it after every probe
and once more with the answer; the sweep views and ``sweep``'s exit code read it back.
The words it uses are declared here, once: a probe's and a bound's verdict (``meets``,
``misses``, ``inconclusive``; ``stopped`` for a probe a signal ended), the search's
``state`` (``running`` until the answer is written, then ``done`` or ``stopped``) and how
it ``ended`` (``resolution``: the bracket narrowed to ``--resolution``; ``all_met``;
``none_met``; ``stopped``).

Units: a latency bound's ``limit``, ``value``, ``low`` and ``high`` are seconds; a
throughput's are its metric's unit. ``elapsed_s`` is the search's wall time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runfmt.codec import EMPTY, key

MEETS, MISSES, INCONCLUSIVE = "meets", "misses", "inconclusive"
#: A probe a signal ended, and a search it stopped.
STOPPED = "stopped"
#: The search's ``state``: answer not yet written, or written.
RUNNING, DONE = "running", "done"
#: How a search ``ended`` besides ``STOPPED``: the bracket narrowed to the resolution,
#: every load given met the bounds, none did.
NARROWED, ALL_MET, NONE_MET = "resolution", "all_met", "none_met"


@dataclass(frozen=True)
class BoundSection:
    """One bound as given (``bound``: ``ttft_p99<500ms``), its metric and its limit."""

    bound: str = ""
    metric: str = ""
    limit: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class CheckSection:
    """One bound judged on one probe: the statistic, its interval, the verdict and, when
    undecided, why and the requests that would decide."""

    bound: str = ""
    metric: str = ""
    limit: float = 0.0
    value: float | None = None
    low: float | None = None
    high: float | None = None
    verdict: str = ""
    reason: str | None = None
    needed_requests: int | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class ProbeSection:
    """One probe: its load, run folder, status, size, its verdict and the checks behind
    it (none when the run failed or was stopped: ``reason`` says which)."""

    value: float = 0.0
    run_dir: str = ""
    status: str = ""
    requests: int | None = None
    client_limited: bool = False
    verdict: str = ""
    reason: str | None = key(omit_none=True, default=None)
    checks: tuple[CheckSection, ...] | None = key(omit_none=True, default=None)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class SearchSection:
    """The search: its bounds and probes in the order run; once done, the answer (the
    highest load met), the bracket ``[met, missed)`` it lies in, the lowest undecided
    load, how it ended, the resolution asked for and its wall time (``null`` while it
    runs; absent in a running search written before they were declared)."""

    bounds: tuple[BoundSection, ...] = ()
    probes: tuple[ProbeSection, ...] = ()
    state: str = RUNNING
    answer: float | None = None
    bracket: tuple[float | None, ...] | None = None
    undecided_at: float | None = None
    ended: str | None = None
    resolution: float | None = None
    elapsed_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    def last_probes(self) -> dict[float, ProbeSection]:
        """The last probe at each load (a rerun with more requests replaces the first)."""
        return {p.value: p for p in self.probes}
