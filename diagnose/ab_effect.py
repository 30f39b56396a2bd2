"""Whether an A/B's comparison decides, against the smallest effect the user cares about.

"Not significant" is not "no difference": an interval of −96 % to +209 % is not
significant and says nothing. With ``--min-effect`` m (default 10 %) a comparison is

* ``equivalent`` — decided, and its whole interval lies within ±m of no change
  (``[1 − m, 1 + m]`` as a ratio): whatever the difference, it is smaller than m — the
  only case the verdict calls "no significant difference". An interval that excludes no
  change but lies within ±m (−0.3 % [−0.4, −0.2] between two seeds of a nearly
  deterministic engine) is such a case: significant, and too small to matter;
* ``significant`` — otherwise, when the interval excludes no change
  (``Comparison.significant``): a difference that may be m or more;
* ``inconclusive`` — anything else: the data cannot tell a change of m or more from none.

An inconclusive comparison says how much data would decide it, by the rule ``compare``
uses (``Comparison.units_to_separate``: the interval's half-width shrinking as 1/√n):
when the observed change is beyond m, the units per arm at which the interval would
exclude no change; when it is within m, those at which the interval would fit inside
±m; when the comparison is below the minimums (``stats.shortfall``), the units those
need. The units are the comparison's own — trials (the per-event metrics' too), or the
pooled data's blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the command reads MIN_EFFECT at start, before numpy is imported
    from diagnose.stats import Comparison

#: The smallest change worth telling from none, by default (``--min-effect``).
MIN_EFFECT = 0.10
SIGNIFICANT, EQUIVALENT, INCONCLUSIVE = "significant", "equivalent", "inconclusive"


def effect_status(c: Comparison, min_effect: float) -> str:
    """equivalent, significant or inconclusive (the module docstring's rule)."""
    if c.inconclusive is None and 1.0 - min_effect <= c.ci_low and c.ci_high <= 1.0 + min_effect:
        return EQUIVALENT
    return SIGNIFICANT if c.significant else INCONCLUSIVE


def units_to_decide(c: Comparison, min_effect: float) -> int | None:
    """Units per arm that would decide an inconclusive comparison (``None``: no size
    would, or it is decided already)."""
    if effect_status(c, min_effect) != INCONCLUSIVE:
        return None
    if c.needed_units is not None:
        return c.needed_units
    if not math.isfinite(c.ratio):
        return None
    if abs(c.ratio - 1.0) > min_effect:
        return c.units_to_separate(1.0)
    needed = [c.units_to_separate(limit) for limit in (1.0 - min_effect, 1.0 + min_effect)]
    known = [n for n in needed if n is not None]
    return max(known) if len(known) == 2 else None


def unit_word(c: Comparison) -> str:
    """What the comparison's units are, for "about N … per arm would decide"."""
    if c.method.startswith("trials"):  # the per-event metrics too: trials are their units
        return "trials"
    return "time blocks" if c.method == "cluster bootstrap" else "requests"


@dataclass(frozen=True)
class Family:
    """The comparisons a verdict may name a winner on, and the level each is read at.

    An A/B names a winner when *any* of them is significant: the stall, or where it does
    not separate the arms the TTFT weighed (and with SLOs, a missed SLO's metric), between
    any pair of arms. Each read at ``confidence`` alone, an A/A would name a winner in up
    to m × (1 − ``confidence``) of runs. So each is read at 1 − (1 − ``confidence``)/m
    (Bonferroni), m = metrics × pairs of arms: its interval, p-value and ``significant``
    are that level's (``diagnose.trials.compare_trials``' ``levels``), and the A/A winner
    rate of the whole decision is at most 1 − ``confidence``. Bonferroni holds whatever
    the comparisons' correlation (the stall and the long prompts' TTFT move together);
    it costs width: 97.5 % instead of 95 % for two metrics.
    """

    metrics: tuple[str, ...]
    arms: int
    confidence: float

    @property
    def size(self) -> int:
        """m: the metrics times the pairs of arms."""
        return len(self.metrics) * (self.arms * (self.arms - 1) // 2)

    @property
    def level(self) -> float:
        return 1.0 - (1.0 - self.confidence) / max(self.size, 1)

    def levels(self) -> dict[str, float]:
        """Each metric's confidence (``Comparer``'s ``levels``)."""
        return dict.fromkeys(self.metrics, self.level)

    def note(self) -> str:
        """What a comparison's method adds: its level and why."""
        return (
            f"; {100 * self.level:.4g} % interval (Bonferroni: one of the {self.size} "
            "comparisons a winner may be named on)"
        )
