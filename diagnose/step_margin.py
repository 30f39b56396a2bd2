"""The server's mean decode step against the roofline step, with its interval: how far
the engine's decode-step histogram lies above the GPU's work (H2's step margin).

**The margin** is the histogram's mean step (exact: its sum over its count) over the
roofline step at the batch it carried, minus 1: ``+0.12`` is 12 % above the roofline.
**Its interval** is the mean's normal interval over the steps at ``MARGIN_CONFIDENCE``,
the spread bounded from the buckets (each observation at its bucket's midpoint, plus the
most a value can stray within its bucket), so it is wider than the truth, never
narrower; a histogram with a step past its last finite bound has no bounded spread and
no margin. **Below**: the share of the steps in buckets wholly at or under the roofline.
The margin is *consistent* when its whole interval lies past ``STEP_MARGIN`` and at most
``BELOW_SHARE`` of the steps fall below (``diagnose.h2_host`` judges H2 by it); the
steps that would decide an interval reaching past the margin follow from its half-width
shrinking as 1/√steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from probes.canonical import Histogram

#: The margin by which the server's mean decode step must exceed the roofline, its whole
#: interval beyond it, for the step histogram alone to support H2.
STEP_MARGIN = 0.10
#: Most of the steps that may lie in buckets wholly below the roofline for it to count.
BELOW_SHARE = 0.10
#: Confidence of the margin's interval.
MARGIN_CONFIDENCE = 0.95


def _signed(value: float) -> str:
    """A whole signed number, with no sign on zero (``+12``, ``-3``, ``0``)."""
    whole = round(value)
    return f"{whole:+d}" if whole else "0"


@dataclass(frozen=True)
class StepMargin:
    """How far the server's decode steps lie above the roofline (module docstring)."""

    margin: float
    low: float
    high: float
    below: float
    steps: int

    @property
    def consistent(self) -> bool:
        return self.low > STEP_MARGIN and self.below <= BELOW_SHARE

    @property
    def strength(self) -> float:
        return self.low / STEP_MARGIN

    def text(self) -> str:
        return (
            f"{self.margin:+.0%} [{self.low:+.0%}, {self.high:+.0%}] over {self.steps} steps, "
            f"{self.below:.0%} of them below the roofline"
        )

    def measured(self) -> str:
        """``+12 % [+9, +14] over the roofline``: the margin as a reader quotes it."""
        low, mid, high = (_signed(100 * v) for v in (self.low, self.margin, self.high))
        return f"{mid} % [{low}, {high}] over the roofline"

    def steps_to_decide(self) -> int | None:
        """Steps at which the interval would clear ``STEP_MARGIN`` on the side its mean
        lies (``None`` when the mean sits on the margin: no size would)."""
        distance = abs(self.margin - STEP_MARGIN)
        half = (self.high - self.low) / 2.0
        if distance <= 0 or half <= 0:
            return None
        return math.ceil(self.steps * (half / distance) ** 2)


def step_margin(steps: Histogram, expected_s: float) -> StepMargin | None:
    """The mean decode step over the roofline step ``expected_s``, minus 1, with its
    interval; ``None`` without finite-bucket observations or a known mean."""
    total = steps.cumulative[-1] if steps.cumulative else 0.0
    if steps.mean is None or total <= 0 or not math.isinf(steps.bounds[-1]):
        return None
    counts = np.diff([0.0, *steps.cumulative])
    if counts[-1] > 0:  # a step past the last finite bound: its spread is unbounded
        return None
    lower = np.array([0.0, *steps.bounds[:-2]])
    upper = np.array(steps.bounds[:-1])
    counts = counts[:-1]
    mid, half = (lower + upper) / 2.0, (upper - lower) / 2.0
    spread = np.sum(counts * ((mid - steps.mean) ** 2 + half**2)) / total
    margin = sps.norm.ppf(0.5 + MARGIN_CONFIDENCE / 2.0) * math.sqrt(spread / total)
    below = float(np.sum(counts[upper <= expected_s]) / total)
    return StepMargin(
        steps.mean / expected_s - 1.0,
        (steps.mean - margin) / expected_s - 1.0,
        (steps.mean + margin) / expected_s - 1.0,
        below,
        round(total),
    )
