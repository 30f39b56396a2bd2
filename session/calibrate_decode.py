"""The decode half of ``simulate --calibrate``: decode efficiency and per-sequence overhead.

A pure-decode step of ``n`` sequences reading ``c`` KV tokens costs, in the cost model,

    step = bytes(c + n) / (bandwidth · efficiency) + per-sequence overhead · n + fixed

(``perfmodel.costmodel``: the weights once and the KV read and written, over the
device's bandwidth; ``fixed`` is the per-step and per-layer overhead). Both unknowns enter
linearly — ``1 / efficiency`` times the roofline's seconds at full bandwidth, and the
overhead times ``n`` — so they are fitted by a linear regression of the run's decode gaps
on those two columns, not by replays:

1. **Observations** (``decode_gaps``): every per-token gap (``probes.token_gaps``' rule)
   with the number of sequences decoding when it ended (requests between their first
   and last token, by the client's clock) and the KV tokens they held (prompt plus
   the output so far, each request's tokens spread evenly over its decode span). A gap
   during which another request was between its send and its first token shared its
   step with a prefill chunk: it is left out (those are the ITL tail, which the prefill
   fit and the replay explain), and their share is reported.
2. **Fit** (``fit_decode``): the *median* regression (least absolute deviations, by
   linear programming) with ``efficiency ≤ 1`` and the overhead ≥ 0. The median, not the
   mean: a busy machine's stalls add a long right tail to the gaps which the engine's
   deterministic steps never reproduce, and the figure the fit serves is the ITL p50.
   Where the server's own step histogram gives the mean pure-decode step (the embedded
   engine's ``prefillscope_engine_step_seconds{kind="decode"}``: sum ÷ count, the
   server's clock), the fit is held to it: the modelled steps' mean (each gap weighted
   ``1/n``, one step for its ``n`` gaps) equals it; when the bounds make that impossible
   the constraint is dropped and ``anchored`` says so.

3. **A per-step host overhead** (``free_step_overhead``): a server that says nothing of
   its steps (a real vLLM) may spend most of a decode step outside the roofline — on a
   CPU, a small model's step is its scheduler and sampler, not its weights. The weights'
   seconds and such an overhead are both constant across decode steps, so the split
   between them is read from what varies: the KV read (the slope on the roofline column)
   sets the efficiency, and the rest of the constant is ``host_overhead_step_s`` — which,
   unlike the weights' read, a step carrying a prompt chunk pays beside its arithmetic
   (``perfmodel.costmodel``: ``max(compute, memory) + overhead``). The embedded engine's
   overhead is recorded in its run, so there the constant stays fixed.

   The efficiency then rests on the KV slope alone, and its weights' read takes the
   matching share of the constant: a slope the gaps do not show is no reason to move the
   constant from the overhead (paid by every step) to the weights (hidden under a chunk
   step's arithmetic). So the efficiency is a **nested-model choice**: the fit is made
   twice, once with the efficiency free and once at the roofline's full bandwidth (1),
   and the free one is kept only when it describes the gaps better beyond the run's own
   noise — the mean |residual| difference per gap, resampled in blocks of
   ``BLOCK_GAPS`` consecutive gaps (a machine's stall spans neighbours) ``RESAMPLES``
   times, has its ``1 − DECIDE_LEVEL`` interval above 0 (``efficiency_decided``). On the
   real vLLM CPU target the free fits that came out at 0.07–0.13 improved the mean
   |residual| by 0.004–0.013 ms of 1.5–5.8 ms, intervals across 0 (undecided), and
   booked 2 ms of a ~6 ms step as weights: what made a smaller budget's extra chunk
   steps too cheap.

How well it fits: the median absolute relative residual, and the fitted steps' mean
against the gaps' (or the server's) mean. The residuals themselves (measured − modelled,
seconds) are the run's **step jitter**: what the machine adds to a step that the
deterministic model never does, which the replay adds back to its gaps' quantiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.optimize import linprog

from perfmodel.costmodel import CostModel
from probes.token_gaps import TokenGaps
from runfmt.calibration import DecodeFit
from runtime.quantiles import quantiles

#: The per-sequence overhead's upper bound (seconds): far above any real server's.
MAX_PER_SEQ_S = 0.1
#: Gaps regressed at most (an evenly spaced subset of a longer run: the LP stays small).
MAX_ROWS = 5_000
#: The free efficiency's test against full bandwidth (module docstring, point 3):
#: consecutive gaps per resampled block, resamples, and the two-sided level.
BLOCK_GAPS, RESAMPLES, DECIDE_LEVEL = 20, 2_000, 0.05


@dataclass(frozen=True)
class RequestSpans:
    """Per request (aligned with ``TokenGaps.request_ids``): when it was sent, when its
    first and last tokens came, and its prompt and output lengths."""

    sent_s: np.ndarray
    first_token_s: np.ndarray
    last_token_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray


@dataclass(frozen=True)
class DecodeGaps:
    """Pure-decode gaps: each gap's length, the sequences decoding with it and their KV."""

    gap_s: np.ndarray
    running: np.ndarray
    context: np.ndarray
    #: Gaps left out for sharing their step with another request's prefill.
    mixed: int


class FittedDecode(NamedTuple):
    """The decode's fit as the calibration writes it, and its residuals: measured −
    modelled seconds per fitted gap, the machine's step jitter (written as quantiles)."""

    fit: DecodeFit
    residuals_s: np.ndarray


def request_spans(requests: pd.DataFrame, gaps: TokenGaps, chunks: pd.DataFrame) -> RequestSpans:
    """``RequestSpans`` of the requests ``gaps`` covers: ``requests`` (a run's requests
    table: ``id``, ``sent_s``, ``prompt_tokens``) and the first and last token-bearing
    chunk of each (``chunks``: ``request_id``, ``t_s``, ``n_tokens``)."""
    ids = pd.Index(gaps.request_ids)
    tokens = chunks[pd.to_numeric(chunks["n_tokens"], errors="coerce").fillna(0) > 0]
    times = tokens.groupby("request_id")["t_s"].agg(["min", "max"]).reindex(ids)
    counts = tokens.groupby("request_id")["n_tokens"].sum().reindex(ids)
    rows = requests.set_index("id").reindex(ids)
    return RequestSpans(
        sent_s=rows["sent_s"].to_numpy(dtype=float),
        first_token_s=times["min"].to_numpy(dtype=float),
        last_token_s=times["max"].to_numpy(dtype=float),
        prompt_tokens=rows["prompt_tokens"].fillna(0).to_numpy(dtype=float),
        output_tokens=counts.fillna(0).to_numpy(dtype=float),
    )


def _active_sum(t: np.ndarray, start: np.ndarray, end: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Σ ``w`` over the spans with ``start < t ≤ end``, for every ``t`` (sorted sums)."""
    s_order, e_order = np.argsort(start), np.argsort(end)
    s_cum = np.concatenate([[0.0], np.cumsum(w[s_order])])
    e_cum = np.concatenate([[0.0], np.cumsum(w[e_order])])
    started = s_cum[np.searchsorted(start[s_order], t, side="left")]
    ended = e_cum[np.searchsorted(end[e_order], t, side="left")]
    return started - ended


def decode_gaps(spans: RequestSpans, gaps: TokenGaps) -> DecodeGaps:
    """The gaps of pure-decode steps, with each step's sequences and KV tokens (the
    module docstring's rules)."""
    keep = gaps.gap_s > 0  # a multi-token chunk's first tokens came with the first token
    gap, end = gaps.gap_s[keep], gaps.t_s[keep]
    first, last = spans.first_token_s, spans.last_token_s
    span = np.maximum(last - first, 1e-12)
    rate = np.where(last > first, np.maximum(spans.output_tokens - 1, 0) / span, 0.0)
    ones = np.ones_like(first)
    running = _active_sum(end, first, last, ones)
    # prompt + rate · (t − first) over the decoding requests, as three sorted sums
    context = (
        _active_sum(end, first, last, spans.prompt_tokens)
        + end * _active_sum(end, first, last, rate)
        - _active_sum(end, first, last, rate * first)
    )
    # requests sent before the gap ended whose first token came after it began
    sent = np.sort(spans.sent_s)
    firsts = np.sort(first)
    prefilling = np.searchsorted(sent, end, side="left") - np.searchsorted(
        firsts, end - gap, side="right"
    )
    pure = (prefilling <= 0) & (running >= 1)
    return DecodeGaps(
        gap_s=gap[pure],
        running=np.rint(running[pure]),
        context=np.maximum(context[pure], 0.0),
        mixed=int((~pure).sum()),
    )


def fit_decode(
    observed: DecodeGaps,
    cost: CostModel,
    server_step_mean_s: float | None = None,
    free_step_overhead: bool = False,
) -> FittedDecode | None:
    """Efficiency and per-sequence overhead fitted to ``observed`` (None: no gaps); with
    ``free_step_overhead``, a per-step host overhead beside them (the module docstring);
    with the residuals."""
    if observed.gap_s.size == 0:
        return None
    pick = np.linspace(0, observed.gap_s.size - 1, min(MAX_ROWS, observed.gap_s.size))
    pick = np.unique(pick.astype(int))
    gap, n = observed.gap_s[pick], observed.running[pick]
    roofline = cost.step_bytes(observed.context[pick] + n, n) / cost.gpu.bandwidth
    comm = cost.comm_time(n)
    y = gap - cost.fixed_overhead_s - comm
    columns = [roofline, n] + ([np.ones_like(n)] if free_step_overhead else [])
    x = np.column_stack(columns)
    rows = len(y)
    step_target = float(np.average(gap, weights=1.0 / n))
    anchor = None
    if server_step_mean_s is not None:
        step_target = server_step_mean_s
        weights = (1.0 / n) / np.sum(1.0 / n)
        anchor = (weights @ x, server_step_mean_s - cost.fixed_overhead_s - float(weights @ comm))
    solved = median_regression(x, y, anchor)
    if solved is None:
        return None
    params, anchored = solved
    decided, gain = None, None
    if free_step_overhead:
        pinned = median_regression(x, y, anchor, full_bandwidth=True)
        if pinned is not None:
            decided, gain = _efficiency_gain(y - x @ params, y - x @ pinned[0])
            if not decided:
                params, anchored = pinned
    u, v = float(params[0]), float(params[1])
    modelled = x @ params + cost.fixed_overhead_s + comm
    at_bound = (
        "bandwidth_efficiency = 1"
        if np.isclose(u, 1.0)
        else "host_overhead_per_seq_s = 0"
        if v <= 0.0
        else None
    )
    fit = DecodeFit(
        bandwidth_efficiency=1.0 / u,
        host_overhead_per_seq_s=v,
        gaps=rows,
        mixed_gaps=observed.mixed,
        median_abs_error=float(np.median(np.abs(modelled - gap) / gap)),
        step_mean_fitted_s=float(np.average(modelled, weights=1.0 / n)),
        step_mean_measured_s=step_target,
        anchored=anchored if server_step_mean_s is not None else None,
        at_bound=at_bound,
        step_overhead_added_s=float(params[2]) if free_step_overhead else 0.0,
        efficiency_decided=decided,
        efficiency_gain_s=gain,
    )
    return FittedDecode(fit, gap - modelled)


def median_regression(
    x: np.ndarray,
    y: np.ndarray,
    anchor: tuple[np.ndarray, float] | None,
    full_bandwidth: bool = False,
) -> tuple[np.ndarray, bool] | None:
    """Least absolute deviations of ``y`` on ``x``'s columns (1/efficiency ≥ 1, the
    per-sequence overhead in [0, ``MAX_PER_SEQ_S``], the rest ≥ 0), held to
    ``anchor`` (a row of column weights and its target) when that is feasible; with
    ``full_bandwidth``, 1/efficiency = 1. The coefficients and whether the anchor held
    (None: no solution)."""
    rows, k = x.shape
    # variables: the k coefficients, then e+ and e− per row
    objective = np.concatenate([np.zeros(k), np.ones(2 * rows)])
    eye = sparse.identity(rows, format="csr")
    a_eq = sparse.hstack([sparse.csr_matrix(x), eye, -eye], format="csr")
    first = (1.0, 1.0) if full_bandwidth else (1.0, None)
    bounds = [first, (0.0, MAX_PER_SEQ_S)] + [(0.0, None)] * (k - 2 + 2 * rows)
    if anchor is not None:
        mean_row = np.concatenate([anchor[0], np.zeros(2 * rows)])
        solution = linprog(
            objective,
            A_eq=sparse.vstack([a_eq, sparse.csr_matrix(mean_row)], format="csr"),
            b_eq=np.concatenate([y, [anchor[1]]]),
            bounds=bounds,
            method="highs",
        )
        if solution.success:
            return np.asarray(solution.x[:k], dtype=float), True
    solution = linprog(objective, A_eq=a_eq, b_eq=y, bounds=bounds, method="highs")
    if not solution.success:
        return None
    return np.asarray(solution.x[:k], dtype=float), False


def _efficiency_gain(
    free: np.ndarray, pinned: np.ndarray
) -> tuple[bool, tuple[float, float, float]]:
    """Whether the free efficiency's residuals ``free`` are smaller than full
    bandwidth's ``pinned`` beyond the gaps' noise: the mean |residual| gain per gap and
    its block-resampled interval (module docstring, point 3)."""
    gain = np.abs(pinned) - np.abs(free)
    blocks = np.array_split(gain, max(2, gain.size // BLOCK_GAPS))
    sums = np.array([b.sum() for b in blocks])
    sizes = np.array([b.size for b in blocks])
    picks = np.random.default_rng(0).integers(0, len(blocks), size=(RESAMPLES, len(blocks)))
    means = sums[picks].sum(axis=1) / sizes[picks].sum(axis=1)
    low, high = quantiles(means, (DECIDE_LEVEL / 2, 1 - DECIDE_LEVEL / 2))
    return bool(low > 0), (float(gain.mean()), float(low), float(high))
