"""Did a modelled engine keep its pace? Its step lateness against the ITL it shaped.

The embedded engine times its steps by a cost model and waits for each step's modelled
end on the wall clock; a starved machine (other processes on the cores, a long pause of
the interpreter) wakes it late, and every token of a late step leaves late by as much.
The engine publishes each step's lateness (``server.step_lateness_s`` in ``summary.json``,
a histogram: its quantiles are interpolated inside buckets); a real vLLM or SGLang server
keeps no modelled schedule to be late against, so for them the pace is unknown, never
"on time".

**The measure.** A late step's delay lands in the gap before its tokens, so a run's p99
inter-token latency can carry up to the step lateness p99 that is the machine's, not the
engine's. The pace is judged by that share: step lateness p99 over the run's client ITL
p99 (per token, ``probes.token_gaps``). Between two runs (the arms of an A/B) a
difference of shares up to ``LATENESS_SHARE`` (10 %) moves their ITL p99 ratio by less
than the smallest change an A/B calls (``diagnose ab --min-effect``, 10 % by default); a
run whose share is beyond twice that (``LATE_SHARE``, 20 %: a fifth of its tail the
machine's) ran late whatever it is compared with (seen: one arm's ITL p99 237 ms against
69 ms in the next run of the same A/B, its client healthy). On an idle 2-core machine
the interference A/B's 512 arm shows about 7 % (its ITL p99 the smallest), the 4096 arm
about 1 %; a faster configuration (ITL p99 ~25 ms) 10–25 % in every trial alike. So bench
warns beyond ``LATE_SHARE``, while an A/B weighs each trial against the others' median
(``diagnose.ab_conditions``): a lateness all trials share dilutes a ratio but cannot make
one, up to ``DILUTED_SHARE``.
"""

from __future__ import annotations

from dataclasses import dataclass

from runfmt.metrics import ITL, by_key
from runfmt.summary import Summary
from runfmt.units import fmt_seconds
from runtime.quantiles import finite_number

#: The latency step lateness is weighed against (its ``p99``): the per-token ITL.
ITL_KEY = ITL.key

#: The most two runs' step lateness shares (lateness p99 over ITL p99) may differ by: the
#: smallest effect an A/B calls (the module docstring).
LATENESS_SHARE = 0.10
#: The share beyond which one run ran late, whatever it is compared with (bench's warning).
LATE_SHARE = 2 * LATENESS_SHARE
#: The share beyond which the machine's lateness may hide an effect, even when every run
#: shares it: a common lateness L dilutes an ITL p99 ratio 1 + e to about 1 + e(1 − share),
#: so past half the tail an effect twice the smallest an A/B calls can fall under it.
DILUTED_SHARE = 0.5


@dataclass(frozen=True)
class EnginePace:
    """A run's step lateness p99 and mean (seconds) and its client ITL p99 (``None``
    when the run has no inter-token gaps)."""

    lateness_p99_s: float
    lateness_mean_s: float
    itl_p99_s: float | None

    @property
    def share(self) -> float | None:
        """Step lateness p99 over ITL p99 (``None`` without an ITL p99)."""
        if self.itl_p99_s is None or self.itl_p99_s <= 0:
            return None
        return self.lateness_p99_s / self.itl_p99_s

    def late(self, bound: float = LATE_SHARE) -> bool:
        """Whether the lateness p99 is beyond ``bound`` of the ITL p99."""
        share = self.share
        return share is not None and share > bound

    def text(self) -> str:
        """``step lateness p99 12 ms (17 % of the ITL p99 70 ms)``."""
        head = f"step lateness p99 {fmt_seconds(self.lateness_p99_s)}"
        named = by_key(ITL_KEY).named("p99")
        if self.share is None or self.itl_p99_s is None:
            return f"{head} (no {named} to weigh it against)"
        return f"{head} ({self.share:.0%} of the {named} {fmt_seconds(self.itl_p99_s)})"


def engine_pace(summary: Summary) -> EnginePace | None:
    """The run's pace, or ``None`` when its server published no step lateness (a real
    server, an older summary) or timed no step over the run."""
    server = summary.server
    lateness = server.step_lateness_s if server is not None else None
    if lateness is None or not lateness.count:
        return None
    p99, mean = finite_number(lateness.p99), finite_number(lateness.mean)
    if p99 is None or mean is None:
        return None
    itl = finite_number(summary.statistic(ITL_KEY, "p99"))
    return EnginePace(p99, mean, itl)


def late_warning(summary: Summary, bound: float = LATE_SHARE) -> str | None:
    """One line when the engine ran late beyond ``bound`` (else ``None``)."""
    pace = engine_pace(summary)
    if pace is None or not pace.late(bound):
        return None
    return (
        f"The engine ran late: {pace.text()}, beyond {bound:.0%}: the latencies include "
        "the machine's stalls, not only the modelled engine's."
    )
