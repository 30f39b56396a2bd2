"""Did the chunk size change what the model says? Greedy outputs compared across arms.

With ``--check-outputs`` every trial asks for greedy decoding with the chosen tokens'
logprobs and keeps the returned token ids, so the same prompt's output can be compared
between arms — the check production teams run when they switch chunked prefill on.
Floating point is not associative, so a different chunking may change logits in the last
bits: bitwise identity is not expected. What is reported, per arm against the reference
arm (trial k against trial k):

* the **exact-match rate**: the share of requests whose output token ids are identical;
* **where outputs first diverge**: the token position of the first different id (or the
  shorter length, when one output is a prefix of the other), as quantiles and as counts
  in position buckets;
* **|Δ logprob|** of the chosen tokens at the positions before the first divergence
  (where both outputs chose the same token), as quantiles and the count over the
  tolerance;
* at the first divergence itself, whether the two different tokens were chosen with
  logprobs within the tolerance of each other: a *near tie*, as a rounding flip would
  look (necessary, not sufficient: telling for sure needs the top-2 logprobs).

The ``status`` of an arm: ``identical`` (same tokens, bitwise-equal logprobs),
``within tolerance`` (same tokens, every |Δ logprob| within the tolerance), ``near ties``
(some outputs diverge, but only at near ties after tokens within the tolerance: likely
rounding, worth a look), ``differs`` (a logprob beyond the tolerance, or a divergence
that is no near tie), ``unknown`` (nothing to compare). It is *consistent* when
``identical`` or ``within tolerance``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from probes.latency import completed_mask
from runfmt.abresult import ArmOutputs, OutputCheck
from runfmt.codec import frozen_map
from runfmt.run import Run
from runtime.quantiles import describe

#: The statuses under which the chunk size did not change what the model says.
CONSISTENT = ("identical", "within tolerance")
#: Upper edges of the first-divergence position buckets (tokens).
POSITION_EDGES = (1, 4, 16, 64, 256, 1024)


@dataclass(frozen=True)
class Output:
    """One request's output: token ids and the chosen tokens' logprobs (if returned)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None


def _sequence(value: Any) -> list[Any] | None:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    return list(value)


def read_outputs(run_dir: Path) -> dict[str, Output]:
    """Completed measured requests that returned their token ids, by request id."""
    if not run_dir.exists():
        return {}
    requests = Run.at(run_dir).tables.measured
    if "output_token_ids" not in requests.columns:
        return {}
    requests = requests[completed_mask(requests)]
    logprobs = requests.get("output_logprobs")
    out: dict[str, Output] = {}
    for i, (rid, ids) in enumerate(zip(requests["id"], requests["output_token_ids"], strict=True)):
        tokens = _sequence(ids)
        if tokens is None:
            continue
        lps = _sequence(logprobs.iloc[i]) if logprobs is not None else None
        out[str(rid)] = Output(
            tuple(int(t) for t in tokens), tuple(float(v) for v in lps) if lps else None
        )
    return out


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where two outputs differ (a length counts); ``None`` if equal."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    if diff.size:
        return int(diff[0])
    return None if len(a) == len(b) else n


@dataclass
class OutputComparison:
    """Outputs of one configuration against another, pooled over trial pairs."""

    tolerance: float
    compared: int = 0
    exact: int = 0
    divergences: list[int] = field(default_factory=list)
    deltas: list[np.ndarray] = field(default_factory=list)
    near_ties: int = 0
    logprobs_known: bool = True

    def add(self, base: dict[str, Output], new: dict[str, Output]) -> None:
        """Compare the requests both runs completed with token ids."""
        for rid in sorted(base.keys() & new.keys()):
            a, b = base[rid], new[rid]
            self.compared += 1
            at = first_divergence(a.token_ids, b.token_ids)
            if at is None:
                self.exact += 1
            else:
                self.divergences.append(at)
            if a.logprobs is None or b.logprobs is None:
                self.logprobs_known = False
                continue
            upto = min(len(a.logprobs), len(b.logprobs), len(a.token_ids) if at is None else at)
            self.deltas.append(np.abs(np.subtract(a.logprobs[:upto], b.logprobs[:upto])))
            if at is not None and at < min(len(a.logprobs), len(b.logprobs)):
                self.near_ties += abs(a.logprobs[at] - b.logprobs[at]) <= self.tolerance

    def _positions(self) -> dict[str, Any]:
        """Where outputs first diverged: quantiles, extremes and counts per bucket."""
        positions = np.asarray(self.divergences, dtype=float)
        edges = [0.0, *POSITION_EDGES, np.inf]
        counts, _ = np.histogram(positions, bins=edges)
        names = [
            f"{lo:g}" if hi - 1 == lo else f"{lo:g}-{hi - 1:g}"
            for lo, hi in itertools.pairwise(edges[:-1])
        ]
        stats = describe(positions)
        return {
            "count": int(positions.size),
            "min": float(positions.min()) if positions.size else None,
            "p50": stats["p50"],
            "p90": stats["p90"],
            "max": float(positions.max()) if positions.size else None,
            "buckets": dict(zip([*names, f"{POSITION_EDGES[-1]}+"], counts.tolist(), strict=True)),
        }

    def status(self, over: int) -> str:
        """See the module docstring."""
        if not self.compared:
            return "unknown"
        exact = self.exact == self.compared
        if not self.logprobs_known:
            return "within tolerance" if exact else "differs"
        if over or self.near_ties < len(self.divergences):
            return "differs"
        if not exact:
            return "near ties"
        return "identical" if all(not d.any() for d in self.deltas) else "within tolerance"

    def check(self) -> OutputCheck:
        """What the comparison found (``ab.json``'s shape)."""
        deltas = np.concatenate(self.deltas) if self.deltas else np.empty(0)
        known = self.logprobs_known and deltas.size > 0
        over = int((deltas > self.tolerance).sum())
        status = self.status(over)
        near_ties = self.near_ties if self.logprobs_known else None
        diff = describe(deltas) | {"max": float(deltas.max())} if known else None
        return OutputCheck(
            compared=self.compared,
            exact_matches=self.exact,
            exact_match_rate=self.exact / self.compared if self.compared else None,
            first_divergence=frozen_map(self._positions() | {"near_ties": near_ties}),
            logprob_abs_diff=frozen_map(diff) if diff is not None else None,
            tokens_over_tolerance=over if known else None,
            tolerance=self.tolerance,
            status=status,
            consistent=status in CONSISTENT if status != "unknown" else None,
        )


def compare_arms(
    base_trials: Sequence[Path], new_trials: Sequence[Path], tolerance: float
) -> OutputCheck:
    """Trial k of one arm against trial k of another, pooled."""
    comparison = OutputComparison(tolerance)
    for base, new in zip(base_trials, new_trials, strict=False):
        comparison.add(read_outputs(base), read_outputs(new))
    return comparison.check()


def baseline(trials: Sequence[Path], tolerance: float) -> OutputCheck | None:
    """One arm's trials against each other (k with k+1): the run-to-run nondeterminism."""
    if len(trials) < 2:
        return None
    return compare_arms(trials[:-1], trials[1:], tolerance)


def _line(name: str, result: OutputCheck) -> str:
    rate = result.exact_match_rate
    if rate is None:
        return f"{name}: nothing to compare (no token ids returned)"
    parts = [f"{rate:.0%} exact"]
    first = result.first_divergence
    if first.get("count"):
        parts.append(f"first divergence at token p50 {first['p50']:.0f}")
    diff = result.logprob_abs_diff
    if diff is not None:
        parts.append(f"|\u0394 logprob| \u2264 {diff['max']:.2g} before it")
    return f"{name}: {', '.join(parts)} ({result.status})"


def outputs_sentence(
    arms: Sequence[ArmOutputs], base: OutputCheck | None, reference: str, tolerance: float
) -> str:
    """What the check found, in one sentence, the reference's own rerun beside it."""
    lines = [_line(f"{a.arm} vs {reference}", a) for a in arms]
    if base is not None:
        lines.append(_line(f"{reference} against itself", base))
    return f"outputs (tolerance {tolerance:g}): " + "; ".join(lines)
