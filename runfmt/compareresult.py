"""``compare --json``: two runs, or two sweeps load by load, compared metric by metric,
declared once as frozen sections.

``diagnose.gate`` decides every verdict and builds a ``CompareDocument`` from its
``CompareResult`` (``session.sweep_compare`` a ``SweepCompareDocument`` of them); the
command's views (``prefillscope.compare_view``: the table, markdown, JUnit XML and JSON)
read these types alone, and ``runfmt.codec`` writes them, so what ``--json`` holds is what
every other format shows.

A row is the comparison's ratio NEW/BASE with its interval (``runfmt.abresult``'s
``RatioInterval``: seconds or per second as the metric registry names the metric, a
figure that could not be computed ``null``), which way is better, how much worse NEW is
(``worse_by``, a fraction; ``null`` when infinite or unknown), its status and why it does
not decide, and the gate on it, if any. The words of the statuses and verdicts are this
module's (``diagnose.gate`` decides which applies).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runfmt.abresult import RatioInterval
from runfmt.codec import EMPTY, key

#: A row's status without a gate, and a gate's verdicts.
SIGNIFICANT, NOT_SIGNIFICANT, INCONCLUSIVE, MISSING = (
    "significant", "not significant", "inconclusive", "missing",
)  # fmt: skip
PASS, FAIL = "pass", "fail"
#: A row (and its gate) that cannot apply to these runs (a stall metric of one-kind runs).
NOT_APPLICABLE = "not applicable"
#: The comparison's verdict when no gate was given.
NO_GATES = "no gates"


def counts_as_failure(verdict: str | None, inconclusive_counts_as: str) -> bool:
    """Whether a gate's ``verdict`` fails the comparison: it failed, or the data could not
    decide it and an undecided gate counts as a failure (``inconclusive_counts_as``,
    ``fail`` by default). An undecided gate counted as a pass is neither (JUnit:
    skipped)."""
    return verdict == FAIL or (verdict == INCONCLUSIVE and inconclusive_counts_as != PASS)


@dataclass(frozen=True)
class GateSection:
    """A row's gate: the worsening it allows (0.10: NEW may be 10 % worse), whether it
    failed, its verdict (pass, fail, inconclusive, not applicable) and how it was given
    (``itl_p99:+10%``)."""

    max_worse_by: float = 0.0
    failed: bool = False
    verdict: str | None = None
    text: str = ""
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class CompareRow(RatioInterval):
    """One metric compared (``metric``: its name, ``itl_p99`` …), with its verdict."""

    higher_is_better: bool = False
    worse_by: float | None = None
    status: str = ""
    missing: str | None = None
    reason: str | None = None
    needed_requests: int | None = None
    #: What the verdict alone would not say (a trade-off of stalls behind a pooled p99).
    note: str | None = None
    not_applicable: str | None = None
    gate: GateSection | None = key(omit_none=True, default=None)  # noqa: RUF009
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    @property
    def is_latency(self) -> bool:
        """A latency (lower is better), not a throughput."""
        return not self.higher_is_better

    @property
    def worse(self) -> bool:
        """NEW is worse than BASE: the ratio on the worse side of 1."""
        return self.ratio < 1.0 if self.higher_is_better else self.ratio > 1.0

    @property
    def gate_verdict(self) -> str | None:
        """The gate's verdict; ``None`` without a gate."""
        return self.gate.verdict if self.gate is not None else None


@dataclass(frozen=True)
class RunLabels:
    """Each run's ``--label`` pairs (``run.json``'s ``labels``)."""

    base: Mapping[str, str] = field(default_factory=EMPTY)
    new: Mapping[str, str] = field(default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class CompareDocument:
    """Two runs compared: their folders and labels, whether the comparison passed and its
    verdict (pass, fail, inconclusive, no gates), what an undecided gate counts as, the
    intervals' confidence, the workload differences compared despite (``--force``), why
    the runs are different draws of the workload (``null``: one draw), and the rows."""

    base: str = ""
    new: str = ""
    labels: RunLabels = field(default_factory=RunLabels)
    passed: bool = False
    verdict: str = NO_GATES
    inconclusive_counts_as: str = FAIL
    confidence: float = 0.95
    workload_differences: tuple[str, ...] = ()
    draws: str | None = None
    comparisons: tuple[CompareRow, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    def gated(self, verdict: str) -> list[CompareRow]:
        """The rows whose gate's verdict is ``verdict``."""
        return [row for row in self.comparisons if row.gate_verdict == verdict]

    def counts_as_failure(self, row: CompareRow) -> bool:
        """Whether ``row``'s gate fails this comparison (``counts_as_failure``)."""
        return counts_as_failure(row.gate_verdict, self.inconclusive_counts_as)


@dataclass(frozen=True)
class SweepKnees:
    """The axis two sweeps were over and each one's knee (``null``: none found)."""

    axis: str = ""
    base: float | None = None
    new: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class SweepCompareDocument:
    """Two sweeps compared: their knees, and each load both completed compared as two
    runs are, by the load's point name (``rate-2`` …), in load order."""

    sweep: SweepKnees = field(default_factory=SweepKnees)
    points: Mapping[str, CompareDocument] = field(default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    @property
    def passed(self) -> bool:
        """Every compared load passed."""
        return all(point.passed for point in self.points.values())

    @property
    def failed_points(self) -> list[str]:
        return [name for name, point in self.points.items() if not point.passed]
