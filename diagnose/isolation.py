"""Does a shared prefix cache let one tenant see another's prompts? The verdict.

``prefillscope isolation`` (``session.isolation``) primes a secret prefix as the victim
tenant, then probes with (a) the same prefix and (b) a fresh one of the same length,
both as the victim itself (the *control*: the channel must exist) and as the attacker
(the *cross* channel, the one under test). Per channel this module weighs two kinds of
evidence:

* **the server's own word** (``CacheEvidence``): a probe of the secret prefix for which
  the server reported more ``cached_tokens`` than for any of the same channel's fresh
  probes was served from the prefix cache. Across tenants that is a leak, no timing needed;
* **the timing channel** (``runfmt.isolation.TtftGap``, measured by
  ``diagnose.isolation_gap``): the median TTFT of hits minus that of misses, with its
  bootstrap interval, and how many probes an attacker needs to tell a hit from a miss at
  95 %.

``assess`` states one verdict per prefix length with the rule it applied; ``overall``
combines the lengths of a sweep. The rules, in order:

1. the server reported cross-tenant hits → ``leaks`` (``by="cached_tokens"``);
2. the cross interval lies wholly below −resolution (hits faster by more than it) →
   ``leaks`` (``by="timing"``), when the interval can be read at all: an arm with fewer
   probes than ``diagnose.stats.shortfall`` asks of a median (``TtftGap.inconclusive``)
   gives a percentile bootstrap that under-covers (four probes of each arm have a handful
   of distinct resampled medians), so a timing rule never decides on it;
3. the server reported cached tokens for every attacker probe of the secret, none of them
   cached, while it reported the victim's own repeats cached (so its reporting sees a hit)
   → ``isolated`` by its own word (``by="cached_tokens"``); the sentence says whether the
   timing agrees (interval within ±resolution) or how many trials it would take to;
4. the control's interval does not lie wholly below −resolution, or has too few probes
   to be read: the experiment cannot see a hit even within one tenant, so it has no power
   → ``inconclusive``
   (``by="no_power"``), with the trials that would show the control's gap when it is
   merely uncertain, none when it is smaller than the resolution at this length;
5. the cross interval, read, lies wholly within ±resolution → ``isolated``
   (``by="timing"``);
6. otherwise ``inconclusive`` with the trials at which the interval would leave the
   band it straddles (``by="undecided"``).

The *resolution* is the smallest gap counted as a channel: seconds (at most
``MAX_RESOLUTION_S``: a prefix-cache hit saves a prefill, which is milliseconds to a few
hundred; a larger band would call any leak ``isolated``), or a share of the control's gap
(default 10 %, at most ``MAX_RESOLUTION_SHARE``: an attacker's channel a tenth of a real
hit's needs a hundred times the probes).

**The target cannot fool it.** Two ways a server could make the audit read ``isolated``
or ``inconclusive`` without earning it are caught before the rules:

* *probes that failed* (a dying server): when more than ``MAX_FAILED_SHARE`` of the
  measured requests (primes and probes) failed, the experiment is ``failed`` and its
  verdict ``inconclusive`` (``by="failed_probes"``), unless the server's own word already
  proved a leak, which no later failure undoes (``failed_verdict``);
* *cached tokens that contradict themselves* (a lying server): a fresh prefix — random
  tokens no one sent before — cannot be cached, so a server reporting more than
  ``FRESH_CACHED_SHARE`` of a fresh probe's prefix as cached has ``cached_tokens`` that
  mean nothing. ``assess`` names it, sets its counts aside (rules 1 and 3 do not apply)
  and decides on timing alone, saying so.

No sentence holds ``nan``: a gap that could not be measured (too few answered probes)
reads "unmeasured" and is inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from diagnose.isolation_gap import probes_to_exclude
from runfmt.isolation import CacheEvidence, Channel, Power, TtftGap, Verdict
from runtime.durations import parse_duration
from workloads.errors import InputError

ISOLATED = "isolated"
LEAKS = "leaks"
INCONCLUSIVE = "inconclusive"
VERDICTS = (ISOLATED, LEAKS, INCONCLUSIVE)
#: The default resolution: a tenth of the control's gap.
DEFAULT_RESOLUTION = "10%"
#: The largest resolution in seconds: a prefix-cache hit saves a prefill (milliseconds to
#: a few hundred); a wider band than this would read any real channel as ``isolated``.
MAX_RESOLUTION_S = 0.5
#: The largest relative resolution: half the gap a hit makes within the victim's tenant.
MAX_RESOLUTION_SHARE = 0.5
#: The share of an experiment's measured requests that may fail before it is ``failed``.
MAX_FAILED_SHARE = 0.1
#: A fresh probe reported cached for more than this share of its prefix contradicts itself.
FRESH_CACHED_SHARE = 0.5


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
        try:
            value = float(raw[:-1]) * 0.01 if relative else parse_duration(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise InputError(flag, f"{text!r} is not a positive time or share", "e.g. 10% or 2ms")
        if relative and value > MAX_RESOLUTION_SHARE:
            raise InputError(
                flag, f"{text!r} is above {MAX_RESOLUTION_SHARE:.0%} of the control's gap",
                "a channel half a real hit's is a leak; e.g. 10%",
            )  # fmt: skip
        if not relative and value > MAX_RESOLUTION_S:
            raise InputError(
                flag, f"{text!r} is above {MAX_RESOLUTION_S * 1e3:g} ms",
                "a cache hit saves a prefill, at most a few hundred ms; e.g. 2ms",
            )  # fmt: skip
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


def cache_evidence(
    hit: Sequence[int | None], miss: Sequence[int | None], prefix_tokens: int = 0
) -> CacheEvidence:
    """What the server reported as cached for one channel: its probes of the secret
    (``hit``) against its fresh ones (``miss``) of ``prefix_tokens`` tokens."""
    hits = [int(c) for c in hit if c is not None]
    misses = [int(c) for c in miss if c is not None]
    baseline = max(misses, default=0)
    return CacheEvidence(
        reported=len(hits),
        hits=sum(c > baseline for c in hits),
        max_hit_tokens=max(hits, default=None),
        max_miss_tokens=max(misses, default=None),
        fresh_cached=sum(c > FRESH_CACHED_SHARE * prefix_tokens for c in misses),
        fresh_reported=len(misses),
    )


def _set_aside(cache: CacheEvidence) -> CacheEvidence:
    """The same probes with the server's counts set aside (as if not reported)."""
    return CacheEvidence(fresh_cached=cache.fresh_cached, fresh_reported=cache.fresh_reported)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:+.1f} ms" if math.isfinite(seconds) else "unmeasured"


def _band(r: float) -> str:
    return f"{r * 1e3:.2f} ms" if math.isfinite(r) else "an unmeasured resolution"


def _interval(gap: TtftGap) -> str:
    if not math.isfinite(gap.gap_s):
        hit, miss = gap.probes
        return f"unmeasured ({hit} hit and {miss} miss probes answered)"
    return f"{_ms(gap.gap_s)} [{_ms(gap.ci_low_s)}, {_ms(gap.ci_high_s)}]"


def contradiction(control: Channel, cross: Channel) -> str | None:
    """Why the server's ``cached_tokens`` cannot be believed (fresh prefixes reported
    cached), or ``None``."""
    lying = control.cache.fresh_cached + cross.cache.fresh_cached
    if not lying:
        return None
    of = control.cache.fresh_reported + cross.cache.fresh_reported
    return (
        f"the server's cached_tokens contradict themselves ({lying} of {of} fresh prefixes "
        f"reported cached): its counts are set aside and the verdict rests on timing alone"
    )


def assess(control: Channel, cross: Channel, resolution: Resolution) -> Verdict:
    """The verdict for one prefix length (the rules in the module docstring)."""
    lying = contradiction(control, cross)
    if lying is not None:
        control = Channel(control.gap, _set_aside(control.cache))
        cross = Channel(cross.gap, _set_aside(cross.cache))
        judged = _assess(control, cross, resolution)
        return replace(judged, sentence=f"{lying}; {judged.sentence}")
    return _assess(control, cross, resolution)


def failed_verdict(verdict: Verdict, reason: str) -> Verdict:
    """The verdict of an experiment whose requests failed beyond ``MAX_FAILED_SHARE``:
    ``inconclusive`` (``by="failed_probes"``), unless the server's own word proved a leak."""
    if verdict.verdict == LEAKS and verdict.by == "cached_tokens":
        return replace(verdict, sentence=f"{verdict.sentence} (before {reason})")
    return Verdict(
        INCONCLUSIVE, "failed_probes", f"{reason}; no verdict rests on the rest",
        verdict.resolution_s,
    )  # fmt: skip


def _assess(control: Channel, cross: Channel, resolution: Resolution) -> Verdict:
    r = resolution.seconds(control.gap.gap_s)
    if cross.cache.hits:
        return Verdict(
            LEAKS,
            "cached_tokens",
            f"the server reported {cross.cache.hits} of {cross.cache.reported} attacker probes "
            f"of the secret prefix as cached (up to {cross.cache.max_hit_tokens} tokens)",
            r,
        )
    readable = cross.gap.inconclusive is None
    if readable and cross.gap.ci_high_s < -r:
        return Verdict(
            LEAKS,
            "timing",
            f"the attacker's probes of the secret were faster: TTFT hit − miss "
            f"{_interval(cross.gap)}, beyond the resolution of {_band(r)}; "
            f"{_probes(cross.gap)}",
            r,
        )
    within = readable and -r < cross.gap.ci_low_s and cross.gap.ci_high_s < r
    needed = None if within else _trials_to_decide(cross.gap, r)
    if within:
        reading = f" within ±{_band(r)}"
    elif not math.isfinite(cross.gap.gap_s):
        reading = f" against ±{_band(r)}"
    elif not readable:
        reading = f" unread ({cross.gap.inconclusive})"
    else:
        reading = f" straddles ±{_band(r)}"
    decide = f"; about {needed} trials would decide" if needed else ""
    timing = f"TTFT hit − miss {_interval(cross.gap)}{reading}{decide}"
    if control.cache.hits and cross.cache.reported >= cross.gap.probes[0] > 0:
        return Verdict(
            ISOLATED,
            "cached_tokens",
            f"the server reported none of the {cross.cache.reported} attacker probes of the secret "
            f"as cached, and {control.cache.hits} of the victim's own repeats; {timing}",
            r,
        )
    if control.gap.inconclusive is not None or not control.gap.ci_high_s < -r:
        short = probes_to_exclude(control.gap, -r) if control.gap.gap_s < -r else None
        why = f"{short} trials would show it" if short else "use a longer prefix"
        if not math.isfinite(control.gap.gap_s):  # too few answered: not the prefix's fault
            why = "more answered trials would measure it"
        elif control.gap.inconclusive is not None:  # too few trials to read an interval
            short = max(short or 0, control.gap.needed_probes or 0) or None
            why = f"too few trials to read ({control.gap.inconclusive})" + (
                f"; {short} trials would show it" if short else ""
            )
        return Verdict(
            INCONCLUSIVE,
            "no_power",
            f"no power: the victim's own repeat of the prefix was not faster by more than "
            f"{_band(r)} (TTFT hit − miss {_interval(control.gap)}); {why}",
            r,
            short,
        )
    if within:
        return Verdict(
            ISOLATED,
            "timing",
            f"{_unreported(cross.cache)}; {timing}, against {_ms(control.gap.gap_s)} within "
            f"the victim's own tenant",
            r,
        )
    return Verdict(INCONCLUSIVE, "undecided", timing, r, needed)


def _unreported(cache: CacheEvidence) -> str:
    return "cached tokens set aside" if cache.fresh_reported else "cached tokens not reported"


def _trials_to_decide(gap: TtftGap, r: float) -> int | None:
    """Trials at which the interval would leave the band ±``r`` it straddles: beyond it
    on the side the gap lies, or within it (at least the probes a readable interval
    needs)."""
    if gap.inconclusive is not None and not all(
        math.isfinite(x) for x in (gap.gap_s, gap.ci_low_s, gap.ci_high_s, r)
    ):
        return gap.needed_probes
    if abs(gap.gap_s) > r:
        return probes_to_exclude(gap, -r if gap.gap_s < 0 else r)
    return max(probes_to_exclude(gap, -r) or 0, probes_to_exclude(gap, r) or 0) or None


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


def detectable_below(rows: Sequence[tuple[int, TtftGap]]) -> Power:
    """The power check of a sweep: the shortest prefix whose control gap is significant
    (hits faster, interval wholly below 0), and the longest shorter one whose is not."""
    seen = sorted((n, g.inconclusive is None and g.ci_high_s < 0) for n, g in rows)
    shortest = next((n for n, ok in seen if ok), None)
    undetected = [n for n, ok in seen if not ok and (shortest is None or n < shortest)]
    return Power(shortest, max(undetected, default=None))
