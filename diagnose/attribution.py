"""Client-side attribution: which inter-token gaps rode alongside someone else's prefill.

Without the engine's step metrics (vLLM, SGLang, llama.cpp expose none by step kind) the
client can still ask H1's question from its own timestamps. A request is prefilling —
or queued for it — from the moment it is sent until its first token arrives. An
inter-token gap of another request that overlaps such a window may have shared its
steps with prompt chunks; a gap that overlaps none was pure decode. If prefill chunks
stretch the steps decodes ride in, the first kind is measurably longer than the second.

Only *long* prefills count (``LONG_PREFILL_TOKENS`` fresh prompt tokens or more: prompt
minus what the cache supplied): a short prompt is computed in one ordinary step under
any budget, and counting every chat turn's admission would dilute the comparison into
meaninglessness. The comparison is a ratio of means and of p99s, with cluster-bootstrap
intervals (a request's gaps are not independent; ``diagnose.stats``). It is a
correlation: a long prefill also means a busier server, which an A/B at matched load
rules out and this does not.

Each gap also carries the load it was measured under — how many requests were decoding
at its midpoint and their mean context (prompt plus tokens produced so far, interpolated
along each request's decode) — which H2 and H3 cost with the roofline model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnose.inputs import RunView
from diagnose.stats import Comparison, Sample, compare_stats
from probes.token_gaps import token_gaps

#: Fresh prompt tokens from which a prefill counts as long: twice the smallest chunk
#: budget in common use (512), so a long prefill needs several small chunks or one large
#: one; a shorter prompt fits about one ordinary step beside the decodes.
LONG_PREFILL_TOKENS = 1024
#: Fewest gaps on each side for the comparison to mean anything.
MIN_GAPS = 20
#: The comparison's samples as a shortfall names them (``diagnose.stats.undecided``):
#: the clear gaps (its BASE), those overlapping a long prefill (its NEW), both.
SIDES = ("clear", "overlapping", "both")


@dataclass(frozen=True)
class DecodeGaps:
    """Per-token gaps of completed requests (zero-length ones — tokens that came with the
    first token — dropped) with the load each was measured under."""

    request: np.ndarray  # cluster code of the gap's request
    start_s: np.ndarray
    end_s: np.ndarray
    gap_s: np.ndarray
    running: np.ndarray  # requests decoding at the gap's midpoint (client view)
    context: np.ndarray  # their mean context in tokens

    def __len__(self) -> int:
        return len(self.gap_s)

    def subset(self, mask: np.ndarray) -> DecodeGaps:
        return DecodeGaps(
            self.request[mask],
            self.start_s[mask],
            self.end_s[mask],
            self.gap_s[mask],
            self.running[mask],
            self.context[mask],
        )

    def sample(self) -> Sample:
        return Sample.of(self.gap_s, self.request)


def decode_load(view: RunView, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Requests in their decode phase (first token ≤ t < end) at each time, and their mean
    context: Σ (prompt + output · progress) / count, by sweeping the starts and ends."""
    first, end = view.column("first_token_s"), view.column("end_s")
    prompt = np.nan_to_num(view.column("prompt_tokens"))
    output = np.nan_to_num(view.column("output_tokens"))
    ok = np.isfinite(first) & np.isfinite(end) & (end > first)
    first, end, prompt, output = first[ok], end[ok], prompt[ok], output[ok]
    rate = output / (end - first)  # tokens per second along the decode

    def live_sum(weights: np.ndarray) -> np.ndarray:
        """Σ weights over requests decoding at each time."""
        by_start, by_end = np.argsort(first), np.argsort(end)
        opened = np.concatenate([[0.0], np.cumsum(weights[by_start])])
        closed = np.concatenate([[0.0], np.cumsum(weights[by_end])])
        started = np.searchsorted(first[by_start], times, side="right")
        ended = np.searchsorted(end[by_end], times, side="right")
        return opened[started] - closed[ended]

    count = np.rint(live_sum(np.ones_like(first)))
    tokens = live_sum(prompt - rate * first) + times * live_sum(rate)
    with np.errstate(invalid="ignore", divide="ignore"):
        context = np.where(count > 0, tokens / np.maximum(count, 1), np.nan)
    return count.astype(np.int64), context


def decode_gaps(view: RunView) -> DecodeGaps:
    """Every per-token gap of the completed requests, with its span and load."""
    ids = view.completed["id"] if "id" in view.completed.columns else []
    gaps = token_gaps(view.chunks, ids)
    # Tokens of one chunk share its arrival time (and the gaps come in request, then time
    # order): together their gaps span the chunk's interval.
    new_chunk = np.ones(len(gaps.t_s), dtype=bool)
    new_chunk[1:] = (gaps.request[1:] != gaps.request[:-1]) | (gaps.t_s[1:] != gaps.t_s[:-1])
    sizes = np.diff(np.append(np.flatnonzero(new_chunk), len(gaps.t_s)))
    start = gaps.t_s - gaps.gap_s * np.repeat(sizes, sizes)
    keep = gaps.gap_s > 0
    mid = (start + gaps.t_s) / 2
    running, context = decode_load(view, mid[keep])
    return DecodeGaps(
        gaps.request[keep], start[keep], gaps.t_s[keep], gaps.gap_s[keep], running, context
    )


def prefill_windows(view: RunView, min_fresh_tokens: int = 0) -> np.ndarray:
    """Merged [sent, first token] intervals of requests with at least ``min_fresh_tokens``
    fresh prompt tokens, as an (n, 2) array of disjoint intervals in time order."""
    sent, first = view.column("sent_s"), view.column("first_token_s")
    keep = np.isfinite(sent) & np.isfinite(first) & (first > sent)
    keep &= view.fresh_tokens() >= min_fresh_tokens
    spans = np.stack([sent[keep], first[keep]], axis=1)
    spans = spans[np.argsort(spans[:, 0])]
    merged: list[list[float]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return np.asarray(merged, dtype=float).reshape(-1, 2)


def overlapping(gaps: DecodeGaps, windows: np.ndarray) -> np.ndarray:
    """True for gaps whose span intersects one of the disjoint ``windows``."""
    if windows.size == 0:
        return np.zeros(len(gaps), dtype=bool)
    last = np.searchsorted(windows[:, 0], gaps.end_s, side="left") - 1
    inside = last >= 0
    reach = np.where(inside, windows[np.clip(last, 0, None), 1], -np.inf)
    return inside & (reach > gaps.start_s)


@dataclass(frozen=True)
class Attribution:
    """Gaps that overlapped a long prefill vs those that overlapped none."""

    windows: int
    overlapping: int
    clear: int
    mean: Comparison | None
    p99: Comparison | None

    @property
    def enough(self) -> bool:
        return self.overlapping >= MIN_GAPS and self.clear >= MIN_GAPS


def attribute(
    view: RunView,
    gaps: DecodeGaps,
    *,
    min_fresh_tokens: int = LONG_PREFILL_TOKENS,
    resamples: int = 1000,
    seed: int = 0,
) -> Attribution:
    """Compare the gaps that overlapped a long prefill with those that did not (ratio
    overlapping / clear, cluster bootstrap by request)."""
    windows = prefill_windows(view, min_fresh_tokens)
    mask = overlapping(gaps, windows)
    result = Attribution(len(windows), int(mask.sum()), int((~mask).sum()), None, None)
    if not result.enough:
        return result
    mean, p99 = compare_stats(
        gaps.subset(~mask).sample(),
        gaps.subset(mask).sample(),
        {"mean": "mean", "p99": "p99"},
        resamples=resamples,
        seed=seed,
        names=("requests", "gaps"),
        sides=SIDES,
    )
    return Attribution(result.windows, result.overlapping, result.clear, mean, p99)
