"""The stall event: one long prompt's prefill, and what it did to the decode streams beside it.

The one definition of a stall event, used by ``summary.json`` (``stalls``), ``compare``
(``stall_worst``, ``stall_lost``), ``diagnose`` (H1) and the chunk-size A/B
(``diagnose.ab_events``).

Pooled over a run, stalls are rare gaps (a 12k-token prompt at budget 8192 is two steps
among hundreds), so a pooled p99 of gaps sits on a cliff: one stall more or less above
the quantile moves it many-fold, and when the stall gaps are fewer than 1 % of all gaps
the p99 does not see them at all. The unit the question is about is the prefill itself.

* **Which requests are long prompts.** When the completed requests carry more than one
  kind (the ``kind`` column the workload sets for every request), the kinds are ordered
  by their median prompt length, longest first (``kinds_longest_first``); the first is
  the prefill-heavy kind (``prefill_kind``: ``long-prompt`` in ``interference``). Its
  requests are the events; every other kind's gaps are the decode streams. A run of one
  kind has no stall events.
* **The event's interval** is its prefill in flight: from its send (``sent_s``) to its
  first token (``first_token_s``). A decode gap (per token, ``probes.token_gaps``; it
  spans ``[t - gap, t]``) belongs to the event when it overlaps that interval. A long
  prompt no decode gap overlaps (the streams had ended) is not an event (``alone``).
* **Per event**: ``stall`` — the worst decode gap overlapping it (the longest the decode
  streams waited for a token while it was prefilled); ``lost`` — the decode time it cost:
  the sum, over those gaps, of each gap's excess over the run's normal step (the median
  decode gap); ``ttft`` — that prompt's TTFT (from its intended send).
* **Stall gaps** are the decode gaps that overlap an event and are longer than
  ``STALL_FACTOR`` × the normal step; their share of all the run's ITL gaps says whether
  a pooled quantile can see the stalls (a p99 sees them only when they are 1 % of the
  gaps or more: ``RunStalls.seen_by``).

Within one run, events are taken as independent: a mean over events gets a
percentile-bootstrap interval from resampling events (``mean_interval``). They are not
quite: long prefills that arrive faster than they are served queue behind one another,
overlap and share the gaps they both cover (``benchmarks/compare_calibration.py``'s
stall traffic at budget 768: 8 or 9 of each run's 11 events overlap the one before;
per-event values correlate at lag one by about 0.5). A comparison of two different
draws therefore widens the interval by the spread between time batches of events
(``diagnose.draws``).
Nothing here needs pandas or scipy: a bench's end computes these.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from probes.token_gaps import TokenGaps
from runfmt.codec import frozen_map
from runfmt.columns import Table, numbers, texts
from runfmt.metrics import STALL_LOST, STALL_WORST, json_name
from runfmt.summary_sections import StallsSection
from runtime.quantiles import Selection, exact_mean, exact_sum, quantile, quantiles, select_passes

#: The decode gaps of a run a part at a time, each call the same parts: per part the gaps
#: (``TokenGaps.gap_s``) and the arrival times of the chunks that carried them (``t_s``).
GapParts = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]

#: A decode gap overlapping a long prefill is a stall gap when it is longer than this
#: many normal steps (the run's median decode gap).
STALL_FACTOR = 1.5
#: Bootstrap resamples and confidence of the intervals ``summary.json`` carries.
SUMMARY_RESAMPLES = 2000
SUMMARY_CONFIDENCE = 0.95
#: The kind a request without one is counted as.
NO_KIND = "request"


@dataclass(frozen=True)
class StallEvents:
    """Per event (a long prompt's prefill): its worst decode gap, the decode time it cost
    and its TTFT, in seconds; and the decode gaps the events stretched."""

    stall_s: np.ndarray
    lost_s: np.ndarray
    ttft_s: np.ndarray
    #: Long prompts with no decode gap beside their prefill (nothing to stall): not events.
    alone: int = 0
    #: Decode gaps overlapping an event and longer than ``STALL_FACTOR`` normal steps.
    stalled_gaps: int = 0
    #: The normal step: the median decode gap (NaN without decode gaps).
    normal_s: float = float("nan")

    @classmethod
    def empty(cls) -> StallEvents:
        return cls(np.empty(0), np.empty(0), np.empty(0))

    @classmethod
    def measure(
        cls,
        starts: Sequence[float],
        ends: Sequence[float],
        ttfts: Sequence[float],
        gap_s: np.ndarray,
        gap_end_s: np.ndarray,
    ) -> StallEvents:
        """The events of one run, in the order of their starts (the order a comparison
        of different draws cuts into time batches): each prefill's interval
        ``[start, end]`` and TTFT, and the decode streams' gaps (each spans
        ``[end - gap, end]``). A prefill no decode gap overlaps (the streams had ended)
        is counted in ``alone``."""
        gap_s, gap_end_s = np.asarray(gap_s, float), np.asarray(gap_end_s, float)
        return cls.measure_parts(starts, ends, ttfts, lambda: ((gap_s, gap_end_s),))

    @classmethod
    def measure_parts(
        cls, starts: Sequence[float], ends: Sequence[float], ttfts: Sequence[float], gaps: GapParts
    ) -> StallEvents:
        """``measure`` with the decode gaps read a part at a time (``GapParts``), twice: the
        normal step (their median, ``runtime.quantiles``) first, then each event's worst
        gap, its lost time (an exactly rounded sum: the same number however the gaps are
        split) and the stall gaps. The events' order is the prefills' order."""
        starts, ends = np.asarray(starts, float), np.asarray(ends, float)
        median = select_passes(lambda _: ({"gap": g} for g, _ in gaps()))
        normal = _median(median.get("gap"))
        worst = np.full(len(starts), -np.inf)
        lost = [0] * len(starts)
        seen = np.zeros(len(starts), dtype=bool)
        stalled = 0
        candidates = np.flatnonzero(np.isfinite(starts) & np.isfinite(ends))
        for gap_s, gap_end_s in gaps():
            gap_s, gap_end_s = np.asarray(gap_s, float), np.asarray(gap_end_s, float)
            excess = np.maximum(gap_s - normal, 0.0)
            long_gap = gap_s > STALL_FACTOR * normal
            stalled_here = np.zeros(len(gap_s), dtype=bool)
            for i in candidates:
                overlaps = (gap_end_s > starts[i]) & (gap_end_s - gap_s < ends[i])
                if overlaps.any():
                    seen[i] = True
                    worst[i] = max(worst[i], float(gap_s[overlaps].max()))
                    lost[i] += exact_sum(excess[overlaps])
                    stalled_here |= overlaps & long_gap
            stalled += int(stalled_here.sum())
        # in the order of their starts (an unknown start last), as ``measure`` gives them
        events = np.array(sorted(np.flatnonzero(seen), key=lambda i: _time_key(starts[i])), int)
        arrays = (
            worst[events].astype(float),
            np.asarray([exact_mean(lost[i], 1) for i in events], dtype=float),
            np.asarray(ttfts, float)[events],
        )
        return cls(*arrays, len(starts) - len(events), stalled, normal)

    @classmethod
    def concat(cls, events: Sequence[StallEvents]) -> StallEvents:
        """Events of several runs (trials) pooled; the normal step is their median's."""
        if not events:
            return cls.empty()
        arrays = (np.concatenate([getattr(e, f) for e in events]) for f in cls._fields())
        normals = [e.normal_s for e in events if math.isfinite(e.normal_s)]
        return cls(
            *arrays,
            alone=sum(e.alone for e in events),
            stalled_gaps=sum(e.stalled_gaps for e in events),
            normal_s=float(np.median(normals)) if normals else float("nan"),
        )

    @staticmethod
    def _fields() -> tuple[str, str, str]:
        return ("stall_s", "lost_s", "ttft_s")

    def __len__(self) -> int:
        return len(self.ttft_s)

    def field(self, name: str) -> np.ndarray:
        """The per-event values of one field (``stall_s``, ``lost_s``, ``ttft_s``)."""
        if name not in self._fields():
            raise KeyError(f"no per-event field {name!r}")
        return getattr(self, name)

    def scaled(self, name: str, factor: float) -> StallEvents:
        """These events with one field's values multiplied by ``factor`` (a planted effect)."""
        return replace(self, **{name: self.field(name) * factor})


def _time_key(start: float) -> float:
    """A start's place in time order; an unknown start sorts last."""
    return start if math.isfinite(start) else math.inf


#: The field of ``StallEvents`` each stall metric of the registry is the mean of.
STALL_FIELDS = {STALL_WORST.key: "stall_s", STALL_LOST.key: "lost_s"}


def kinds_longest_first(kinds: Any, prompt_tokens: Any) -> list[str]:
    """The request kinds, longest median prompt first (ties by name); empty when there is
    a single kind (then there are no stall events)."""
    kinds = np.asarray(kinds, dtype=object)
    prompts = np.asarray(prompt_tokens, dtype=float)
    names = sorted({str(k) for k in kinds.tolist()})
    return longest_first({k: quantile(prompts[kinds == k], 0.5) for k in names})


def longest_first(medians: Mapping[str, float]) -> list[str]:
    """``kinds_longest_first`` from each kind's median prompt (NaN: no prompt known)."""
    if len(medians) < 2:
        return []
    known = {k: v if math.isfinite(v) else 0.0 for k, v in medians.items()}
    return sorted(known, key=lambda k: (-known[k], k))


def _median(selection: Selection | None) -> float:
    """The median a ``Selection`` found (NaN for no values): ``quantile(…, 0.5)``."""
    value = selection.describe()["p50"] if selection is not None else None
    return float(value) if value is not None else float("nan")


def prefill_kind(kinds: Sequence[str]) -> str | None:
    """The prefill-heavy kind of ``kinds_longest_first``: the long prompts (``None``: one kind)."""
    return kinds[0] if kinds else None


@dataclass(frozen=True)
class RunStalls:
    """A run's stall events, the kind they are of, and the run's ITL gaps in all."""

    kind: str | None
    events: StallEvents
    gaps: int

    @classmethod
    def none(cls, gaps: int = 0) -> RunStalls:
        return cls(None, StallEvents.empty(), gaps)

    @property
    def share(self) -> float:
        """Stall gaps as a share of all the run's ITL gaps (NaN without gaps)."""
        return self.events.stalled_gaps / self.gaps if self.gaps else float("nan")

    def seen_by(self, q: float) -> bool:
        """Whether the pooled ITL quantile ``q`` (0.99) reaches the stall gaps: they are at
        least ``1 − q`` of the gaps (trivially, when there are no events)."""
        if not len(self.events):
            return True
        return bool(self.share >= 1.0 - q - 1e-12)

    def values(self, key: str) -> np.ndarray:
        """Per-event values of a stall metric (``STALL_FIELDS``' keys)."""
        return self.events.field(STALL_FIELDS[key])


def run_stalls(requests: Table, ttft_s: Any, gaps: TokenGaps) -> RunStalls:
    """The stall events of one run: ``requests`` its completed requests (``id``, ``kind``,
    ``prompt_tokens``, ``sent_s``, ``first_token_s``), ``ttft_s`` their TTFTs in that order,
    ``gaps`` the ITL gaps of those requests."""
    total = len(gaps.gap_s)
    kinds = np.asarray(texts(requests, "kind", NO_KIND), dtype=object)
    kind = prefill_kind(kinds_longest_first(kinds, numbers(requests, "prompt_tokens")))
    if kind is None:
        return RunStalls.none(total)
    is_long = kinds == kind
    long_ids = set(np.asarray(requests["id"], dtype=object)[is_long].tolist())
    decode = ~gaps_of_requests(gaps, long_ids)
    events = StallEvents.measure(
        numbers(requests, "sent_s")[is_long],
        numbers(requests, "first_token_s")[is_long],
        np.asarray(ttft_s, float)[is_long],
        gaps.gap_s[decode],
        gaps.t_s[decode],
    )
    return RunStalls(kind, events, total)


def gaps_of_requests(gaps: TokenGaps, ids: set[Any]) -> np.ndarray:
    """True for each gap of ``gaps`` that belongs to one of the requests ``ids``."""
    if not len(gaps.gap_s):
        return np.zeros(0, dtype=bool)
    gap_ids = gaps.request_ids[gaps.request]
    return np.fromiter((i in ids for i in gap_ids.tolist()), bool, len(gap_ids))


def mean_interval(
    values: Any, confidence: float, resamples: int, seed: Any = 0
) -> tuple[float, float] | None:
    """A percentile-bootstrap interval of the mean of independent ``values`` (resampled
    with replacement ``resamples`` times); ``None`` below two values."""
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return None
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    alpha = 1.0 - confidence
    low, high = quantiles(means, (alpha / 2.0, 1.0 - alpha / 2.0))
    return float(low), float(high)


def _known(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def stall_summary(
    stalls: RunStalls,
    *,
    confidence: float = SUMMARY_CONFIDENCE,
    resamples: int = SUMMARY_RESAMPLES,
    seed: int = 0,
) -> StallsSection | None:
    """``summary.json``'s ``stalls``: ``None`` for a run of one request kind; else the
    long prompts' kind, the events and the long prompts alone, the stall gaps and their
    share of all gaps, the normal step, whether the pooled ITL p99 sees the stalls, and
    per stall metric the mean over events with its interval and the worst event."""
    if stalls.kind is None:
        return None
    events = stalls.events
    figures: dict[str, Any] = {}
    for metric in (STALL_WORST, STALL_LOST):
        values = stalls.values(metric.key)
        interval = mean_interval(values, confidence, resamples, seed)
        some = len(values) > 0
        figures[json_name(metric.prefix, part="mean")] = float(np.mean(values)) if some else None
        figures[json_name(metric.prefix, part="interval")] = tuple(interval or (None, None))
        figures[json_name(metric.prefix, part="max")] = float(np.max(values)) if some else None
    return StallsSection(
        kind=stalls.kind,
        events=len(events),
        alone=events.alone,
        gaps=stalls.gaps,
        stall_gaps=events.stalled_gaps,
        stall_gap_share=_known(stalls.share),
        normal_gap_s=_known(events.normal_s),
        seen_by_itl_p99=stalls.seen_by(0.99),
        confidence=confidence,
        figures=frozen_map(figures),
    )
