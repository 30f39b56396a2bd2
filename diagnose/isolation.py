"""Does a shared prefix cache let one tenant see another's prompts? The verdict.

``prefillscope isolation`` (``session.isolation``) primes a secret prefix as the victim
tenant, then probes with (a) the same prefix and (b) a fresh one of the same length,
both as the victim itself (the *control*: the channel must exist) and as the attacker
(the *cross* channel, the one under test). Per channel this module weighs two kinds of
evidence:

* **the server's own word** (``CacheEvidence``): a probe of the secret prefix for which
  the server reported more ``cached_tokens`` than for any of the same channel's fresh
  probes was served from the prefix cache. Across tenants that is a leak, no timing needed;
* **the timing channel** (``diagnose.isolation_gap.TtftGap``): the median TTFT of hits
  minus that of misses, with its bootstrap interval, and how many probes an attacker needs
  to tell a hit from a miss at 95 %.

``assess`` states one verdict per prefix length with the rule it applied; ``overall``
combines the lengths of a sweep. The rules, in order:

1. the server reported cross-tenant hits → ``leaks`` (``by="cached_tokens"``);
2. the cross interval lies wholly below −resolution (hits faster by more than it) →
   ``leaks`` (``by="timing"``);
3. the server reported cached tokens for every attacker probe of the secret, none of them
   cached, while it reported the victim's own repeats cached (so its reporting sees a hit)
   → ``isolated`` by its own word (``by="cached_tokens"``); the sentence says whether the
   timing agrees (interval within ±resolution) or how many trials it would take to;
4. the control's interval does not lie wholly below −resolution: the experiment cannot
   see a hit even within one tenant, so it has no power → ``inconclusive``
   (``by="no_power"``), with the trials that would show the control's gap when it is
   merely uncertain, none when it is smaller than the resolution at this length;
5. the cross interval lies wholly within ±resolution → ``isolated`` (``by="timing"``);
6. otherwise ``inconclusive`` with the trials at which the interval would leave the
   band it straddles (``by="undecided"``).

The *resolution* is the smallest gap counted as a channel: seconds, or a share of the
control's gap (default 10 %: an attacker's channel a tenth of a real hit's needs a
hundred times the probes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from diagnose.isolation_gap import TtftGap
from workloads.errors import InputError

ISOLATED = "isolated"
LEAKS = "leaks"
INCONCLUSIVE = "inconclusive"
VERDICTS = (ISOLATED, LEAKS, INCONCLUSIVE)
#: The default resolution: a tenth of the control's gap.
DEFAULT_RESOLUTION = "10%"


@dataclass(frozen=True)
class Resolution:
    """The smallest hit − miss gap that counts: ``value`` seconds, or ``value`` × the
    control's gap when ``relative``."""

    value: float
    relative: bool

    @classmethod
    def parse(cls, text: str, flag: str = "--resolution") -> Resolution:
        """``10%`` (of the control's gap), ``2ms``, ``0.002s`` or ``2`` (milliseconds)."""
        raw = text.strip().lower()
        relative = raw.endswith("%")
        scale = 0.01 if relative else 1e-3
        for unit, factor in (("%", 0.01), ("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
            if raw.endswith(unit):
                raw, scale = raw.removesuffix(unit), factor
                break
        try:
            value = float(raw) * scale
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0 or (relative and value >= 1):
            raise InputError(
                flag, f"{text!r} is not a positive time or a share below 100 %", "e.g. 10% or 2ms"
            )
        return cls(value, relative)

    def seconds(self, control_gap_s: float) -> float:
        """The resolution in seconds, given the control's measured gap."""
        if not self.relative:
            return self.value
        return self.value * abs(control_gap_s) if math.isfinite(control_gap_s) else math.nan

    def describe(self) -> str:
        return (
            f"{self.value:.0%} of the control's gap"
            if self.relative
            else f"{self.value * 1e3:g} ms"
        )


@dataclass(frozen=True)
class CacheEvidence:
    """What the server reported as cached for one channel's probes of the secret."""

    #: Probes of the secret prefix whose ``cached_tokens`` the server reported.
    reported: int
    #: Of those, how many it reported more cached tokens for than any fresh probe.
    hits: int
    #: The most cached tokens reported for a probe of the secret (None: never reported).
    max_hit_tokens: int | None
    #: The most reported for a fresh probe (the baseline a hit must exceed).
    max_miss_tokens: int | None

    @classmethod
    def of(cls, hit: Sequence[int | None], miss: Sequence[int | None]) -> CacheEvidence:
        hits = [int(c) for c in hit if c is not None]
        misses = [int(c) for c in miss if c is not None]
        baseline = max(misses, default=0)
        return cls(
            reported=len(hits),
            hits=sum(c > baseline for c in hits),
            max_hit_tokens=max(hits, default=None),
            max_miss_tokens=max(misses, default=None),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Channel:
    """One prober's view: the timing gap and the server's cache report."""

    gap: TtftGap
    cache: CacheEvidence

    def to_dict(self) -> dict[str, Any]:
        return {"ttft": self.gap.to_dict(), "cached_tokens": self.cache.to_dict()}


@dataclass(frozen=True)
class Verdict:
    """The verdict on one experiment (or a sweep), the rule behind it, and what would decide."""

    verdict: str
    by: str
    sentence: str
    resolution_s: float
    trials_needed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["resolution_s"] = self.resolution_s if math.isfinite(self.resolution_s) else None
        return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:+.1f} ms"


def _interval(gap: TtftGap) -> str:
    return f"{_ms(gap.gap_s)} [{_ms(gap.ci_low_s)}, {_ms(gap.ci_high_s)}]"


def assess(control: Channel, cross: Channel, resolution: Resolution) -> Verdict:
    """The verdict for one prefix length (the rules in the module docstring)."""
    r = resolution.seconds(control.gap.gap_s)
    if cross.cache.hits:
        return Verdict(
            LEAKS,
            "cached_tokens",
            f"the server reported {cross.cache.hits} of {cross.cache.reported} attacker probes "
            f"of the secret prefix as cached (up to {cross.cache.max_hit_tokens} tokens)",
            r,
        )
    if cross.gap.ci_high_s < -r:
        return Verdict(
            LEAKS,
            "timing",
            f"the attacker's probes of the secret were faster: TTFT hit − miss "
            f"{_interval(cross.gap)}, beyond the resolution of {r * 1e3:.2f} ms; "
            f"{_probes(cross.gap)}",
            r,
        )
    within = -r < cross.gap.ci_low_s and cross.gap.ci_high_s < r
    needed = None if within else _trials_to_decide(cross.gap, r)
    timing = f"TTFT hit − miss {_interval(cross.gap)}" + (
        f" within ±{r * 1e3:.2f} ms"
        if within
        else f" straddles ±{r * 1e3:.2f} ms"
        + (f"; about {needed} trials would decide" if needed else "")
    )
    if control.cache.hits and cross.cache.reported >= cross.gap.probes[0] > 0:
        return Verdict(
            ISOLATED,
            "cached_tokens",
            f"the server reported none of the {cross.cache.reported} attacker probes of the secret "
            f"as cached, and {control.cache.hits} of the victim's own repeats; {timing}",
            r,
        )
    if not control.gap.ci_high_s < -r:
        short = control.gap.probes_to_exclude(-r) if control.gap.gap_s < -r else None
        why = f"{short} trials would show it" if short else "use a longer prefix"
        return Verdict(
            INCONCLUSIVE,
            "no_power",
            f"no power: the victim's own repeat of the prefix was not faster by more than "
            f"{r * 1e3:.2f} ms (TTFT hit − miss {_interval(control.gap)}); {why}",
            r,
            short,
        )
    if within:
        return Verdict(
            ISOLATED,
            "timing",
            f"cached tokens not reported; {timing}, against {_ms(control.gap.gap_s)} within "
            f"the victim's own tenant",
            r,
        )
    return Verdict(INCONCLUSIVE, "undecided", timing, r, needed)


def _trials_to_decide(gap: TtftGap, r: float) -> int | None:
    """Trials at which the interval would leave the band ±``r`` it straddles: beyond it
    on the side the gap lies, or within it."""
    if abs(gap.gap_s) > r:
        return gap.probes_to_exclude(-r if gap.gap_s < 0 else r)
    return max(gap.probes_to_exclude(-r) or 0, gap.probes_to_exclude(r) or 0) or None


def _probes(gap: TtftGap) -> str:
    n = gap.probes_needed_95
    if n is None:
        return "the gap is too noisy to count probes"
    return "one probe tells a hit at 95 %" if n == 1 else f"{n} probes tell a hit at 95 %"


def overall(verdicts: Sequence[tuple[int, Verdict]]) -> Verdict:
    """One verdict for a sweep of prefix lengths (``(tokens, verdict)`` pairs).

    Any leak leaks. Lengths without power are set aside unless no length had power; of
    the rest, an undecided one leaves the whole undecided; else isolated.
    """
    if not verdicts:
        return Verdict(INCONCLUSIVE, "no_trials", "no trial finished", math.nan)
    leaks = [(n, v) for n, v in verdicts if v.verdict == LEAKS]
    if leaks:
        n, v = leaks[0]
        return Verdict(LEAKS, v.by, f"at {n} prefix tokens: {v.sentence}", v.resolution_s)
    powered = [(n, v) for n, v in verdicts if v.by != "no_power"]
    if not powered:
        n, v = verdicts[-1]
        return Verdict(
            INCONCLUSIVE, v.by, f"at {n} prefix tokens: {v.sentence}", v.resolution_s,
            v.trials_needed,
        )  # fmt: skip
    undecided = [(n, v) for n, v in powered if v.verdict == INCONCLUSIVE]
    n, v = undecided[0] if undecided else powered[-1]
    weak = [m for m, w in verdicts if w.by == "no_power"]
    below = f"; no timing channel to test at {_lengths(weak)} tokens" if weak else ""
    return Verdict(
        v.verdict, v.by, f"at {n} prefix tokens: {v.sentence}{below}", v.resolution_s,
        v.trials_needed,
    )  # fmt: skip


def _lengths(tokens: Sequence[int]) -> str:
    return ", ".join(str(n) for n in tokens)


def detectable_below(rows: Sequence[tuple[int, TtftGap]]) -> dict[str, int | None]:
    """The power check of a sweep: the shortest prefix whose control gap is significant
    (hits faster, interval wholly below 0), and the longest shorter one whose is not."""
    seen = sorted((n, g.ci_high_s < 0) for n, g in rows)
    shortest = next((n for n, ok in seen if ok), None)
    undetected = [n for n, ok in seen if not ok and (shortest is None or n < shortest)]
    return {
        "shortest_detectable_tokens": shortest,
        "longest_undetectable_tokens": max(undetected, default=None),
    }
