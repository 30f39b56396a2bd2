"""A gate's verdict on one metric, and the verdict of a whole comparison.

A gate ``METRIC:+X%`` reads the metric's bootstrap interval (``diagnose.stats``) against
its limit — 1 + X for a latency, 1 − X for a throughput — one rule for every verdict:

* **fail** — the whole interval is worse than the limit: NEW is worse by more than X;
* **pass** — the whole interval is better than the limit: NEW is worse by less than X;
* **inconclusive** — the interval holds the limit, a run is too small to decide
  (``stats.shortfall``), or the metric is missing from a run (no ITL gaps, no completed
  request). The row says why and the run size that would decide it. What an
  inconclusive gate counts as is the caller's choice (``CompareResult.inconclusive``,
  ``"fail"`` by default: a gate that cannot see must not pass).

A row without a gate is ``significant`` (the interval excludes 1), ``not significant``,
``inconclusive`` or ``missing``. A stall metric of runs with one request kind (no long
prefills beside decode streams, so no stall can happen), or of runs in which no decode gap
beside a long prefill was a stall gap (``probes.stall_events``: nothing stalled), is
``not applicable``: its gate neither passes nor fails, and does not hold a comparison up.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from diagnose.metrics import CONFIDENCE, MetricSpec, metric_spec
from diagnose.stats import Comparison
from runfmt.abresult import RatioInterval
from runfmt.codec import frozen_map
from runfmt.compareresult import (
    FAIL,
    INCONCLUSIVE,
    MISSING,
    NO_GATES,
    NOT_APPLICABLE,
    NOT_SIGNIFICANT,
    PASS,
    SIGNIFICANT,
    CompareDocument,
    CompareRow,
    GateSection,
    RunLabels,
    counts_as_failure,
)
from workloads.errors import InputError


@dataclass(frozen=True)
class Gate:
    """Fail when ``metric`` gets worse by more than ``max_worsening`` (0.10 = 10 %)."""

    metric: MetricSpec
    max_worsening: float

    @property
    def text(self) -> str:
        return f"{self.metric.name}:+{self.max_worsening * 100:g}%"


#: The largest X of a latency gate ``METRIC:+X%``: NEW up to 10x BASE.
MAX_LATENCY_GATE_PCT = 900.0
#: A throughput gate's X is below this: a throughput 100 % worse is none at all.
MAX_THROUGHPUT_GATE_PCT = 100.0
_GATE = re.compile(r"^\s*([a-z0-9_]+)\s*:\s*\+?\s*(\d+(?:\.\d+)?)\s*%\s*$")
_GATE_FIX = "write --gate METRIC:+X%, e.g. --gate itl_p99:+10% (NEW may be up to 10 % worse)"


def parse_gate(text: str) -> Gate:
    """Parse ``METRIC:+X%`` (``itl_p99:+10%``, ``output_tokens_per_s:+5%``)."""
    match = _GATE.match(text.lower())
    if match is None:
        raise InputError("--gate", f"{text!r} is not METRIC:+X%", _GATE_FIX)
    spec = metric_spec(match[1], flag="--gate")
    percent = float(match[2])
    # a throughput cannot lose more than all of itself (at 100 % the limit is 0: any NEW
    # passes); +1e30 % on a latency was taken, a gate no regression could fail
    cap = MAX_THROUGHPUT_GATE_PCT if spec.higher_is_better else MAX_LATENCY_GATE_PCT
    if percent >= cap if spec.higher_is_better else percent > cap:
        bound = f"below {cap:g} %" if spec.higher_is_better else f"at most {cap:g} %"
        what = "a throughput" if spec.higher_is_better else "a latency"
        raise InputError(
            "--gate",
            f"{text.strip()!r}: {match[2]} % is no limit for {what} (X must be {bound})",
            _GATE_FIX,
        )
    return Gate(spec, percent / 100.0)


def worsening(spec: MetricSpec, ratio: float) -> float:
    """How much worse NEW is than BASE as a fraction (negative: better)."""
    return ratio - 1.0 if spec.is_latency else 1.0 - ratio


@dataclass(frozen=True)
class MetricResult:
    """One row of the comparison: the metric, its comparison and the gate on it, if any.

    ``missing`` says what a run lacks for the metric (then the comparison has no
    interval); ``needed_requests`` is the run size per run that would decide the gate
    (or the metric, without a gate) when it is inconclusive.
    """

    spec: MetricSpec
    comparison: Comparison
    gate: Gate | None = None
    missing: str | None = None
    needed_requests: int | None = None
    #: What the verdict alone would not say (a trade-off of stalls behind a pooled p99).
    note: str | None = None
    #: Why the metric cannot apply to these runs (a stall metric of one-kind runs).
    not_applicable: str | None = None

    @property
    def worsening(self) -> float:
        return worsening(self.spec, self.comparison.ratio)

    @property
    def status(self) -> str:
        """significant, not significant, inconclusive, missing (the interval vs 1) or not
        applicable."""
        if self.not_applicable:
            return NOT_APPLICABLE
        if self.missing:
            return MISSING
        if self.comparison.inconclusive:
            return INCONCLUSIVE
        return SIGNIFICANT if self.comparison.significant else NOT_SIGNIFICANT

    @property
    def limit(self) -> float | None:
        """The ratio NEW/BASE the gate allows at most (latency) or at least (throughput)."""
        if self.gate is None:
            return None
        x = self.gate.max_worsening
        return 1.0 - x if self.spec.higher_is_better else 1.0 + x

    @property
    def gate_verdict(self) -> str | None:
        """pass, fail or inconclusive: the interval against the gate's limit."""
        if self.gate is None or self.limit is None:
            return None
        if self.not_applicable:
            return NOT_APPLICABLE
        if self.missing or self.comparison.inconclusive:
            return INCONCLUSIVE
        worse_side = -1 if self.spec.higher_is_better else 1
        side = self.comparison.side(self.limit)
        if side == 0:
            return INCONCLUSIVE
        return FAIL if side == worse_side else PASS

    @property
    def gate_failed(self) -> bool:
        return self.gate_verdict == FAIL

    @property
    def reason(self) -> str | None:
        """Why this row does not decide, in one line; ``None`` when it does."""
        c = self.comparison
        if self.not_applicable:
            return self.not_applicable
        if self.missing:
            return f"missing: {self.missing}"
        if c.inconclusive and self.needed_requests is None:
            return c.inconclusive
        if c.inconclusive:
            return f"{c.inconclusive}; at least {self.needed_requests} requests per run needed"
        if self.gate_verdict != INCONCLUSIVE or self.limit is None:
            return None
        held = f"the interval {_pct(c.ci_low)}…{_pct(c.ci_high)} holds the {_pct(self.limit)} limit"
        if self.needed_requests is None:
            return f"{held}; the change is at the limit, no run size separates them"
        return (
            f"{held}; about {self.needed_requests} requests per run would separate the "
            f"observed {_pct(c.ratio)} from it"
        )

    def document(self) -> CompareRow:
        """The row as ``compare --json`` writes it and every view reads it."""
        gate = None
        if self.gate is not None:
            gate = GateSection(
                max_worse_by=self.gate.max_worsening,
                failed=self.gate_failed,
                verdict=self.gate_verdict,
                text=self.gate.text,
            )
        interval = {f.name: getattr(self.comparison, f.name) for f in fields(RatioInterval)}
        return CompareRow(
            **interval,
            higher_is_better=self.spec.higher_is_better,
            worse_by=self.worsening if math.isfinite(self.worsening) else None,
            status=self.status,
            missing=self.missing,
            reason=self.reason,
            needed_requests=self.needed_requests,
            note=self.note,
            not_applicable=self.not_applicable,
            gate=gate,
        )


def _pct(ratio: float) -> str:
    return f"{(ratio - 1.0) * 100:+.1f}%"


@dataclass(frozen=True)
class CompareResult:
    base: Path
    new: Path
    rows: list[MetricResult]
    differences: list[str] = field(default_factory=list)
    confidence: float = CONFIDENCE
    inconclusive: str = FAIL
    #: Each run's ``--label`` pairs (run.json's ``labels``): BASE's, NEW's.
    labels: tuple[dict[str, str], dict[str, str]] = ({}, {})
    #: Why BASE and NEW are different draws of the workload (``None``: one draw).
    draws: str | None = None

    @property
    def failed_gates(self) -> list[MetricResult]:
        return [row for row in self.rows if row.gate_verdict == FAIL]

    @property
    def undecided_gates(self) -> list[MetricResult]:
        return [row for row in self.rows if row.gate_verdict == INCONCLUSIVE]

    @property
    def verdict(self) -> str:
        """fail, inconclusive or pass (gates), or "no gates"."""
        if self.failed_gates:
            return FAIL
        if self.undecided_gates:
            return INCONCLUSIVE
        return PASS if any(row.gate for row in self.rows) else NO_GATES

    def counts_as_failure(self, row: MetricResult) -> bool:
        """Whether ``row``'s gate fails the comparison (``runfmt.compareresult``'s
        ``counts_as_failure``: failed, or undecided while that counts as a failure)."""
        return counts_as_failure(row.gate_verdict, self.inconclusive)

    @property
    def passed(self) -> bool:
        return not any(self.counts_as_failure(row) for row in self.rows)

    def document(self) -> CompareDocument:
        """The comparison as ``compare --json`` writes it and every view reads it."""
        return CompareDocument(
            base=str(self.base),
            new=str(self.new),
            labels=RunLabels(frozen_map(self.labels[0]), frozen_map(self.labels[1])),
            passed=self.passed,
            verdict=self.verdict,
            inconclusive_counts_as=self.inconclusive,
            confidence=self.confidence,
            workload_differences=tuple(self.differences),
            draws=self.draws,
            comparisons=tuple(row.document() for row in self.rows),
        )
