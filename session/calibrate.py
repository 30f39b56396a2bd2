"""``simulate --calibrate RUN_DIR``: fit the cost model to a measured run, then replay it.

The run decides the engine it is fitted on (``session.calibrate_target``: GPU, model and
chunk budget from its ``run.json``, refused when it does not say and ``--engine`` does
not either), and what the fit reads of it is ``session.calibrate_reading``'s (TTFT from
the actual send, the server's clock where it has one). Then, in order:

1. the **decode** (``session.calibrate_decode``): ``bandwidth_efficiency`` and
   ``host_overhead_per_seq_s`` by a median regression of the run's pure-decode gaps,
   held to the server's mean decode step where it has one; for a server that says
   nothing of its steps, with a per-step ``host_overhead_step_s`` beside them. Its
   residuals are the run's **step jitter**;
2. the **steps carrying prompt chunks**, by bisection on replays of the run's recorded
   requests (send times, prompt and output lengths) on the virtual clock:
   * where the server times its steps by kind (the embedded engine), on the server's
     own clock, with no client in between: ``prefill_mfu`` so that the replay's mean
     step carrying prompt chunks (prefill only and mixed) is the server's (per step: the
     seconds per chunk token, tried too, moved further under a loaded machine's late
     steps), then ``bandwidth_efficiency`` so that its mean decode step is the server's,
     twice over (each moves the other's batches a little). The per-sequence overhead
     stays the regression's: the server's mean gap per token would set it apart from a
     slower read, but the embedded engine times its gaps on the wall clock (a loaded
     machine's late wake-ups, which its step histogram does not count), and fitted to it
     the overhead took up that lateness. The regression has its own limit there: a
     heavily loaded client's gaps grow with its streams, which reads as a per-sequence
     overhead that the efficiency then offsets (load average 23: 0.11 ms per sequence
     against none, efficiency 0.98 against 0.80; at load average 4, both within 1 %);
   * else ``prefill_mfu`` so that the replay's median TTFT plus the **transport** (the
     client's mean TTFT less the server's, ``RunReading.transport_s``) is the client's
     median TTFT from the actual send. The median, not the mean: a loaded machine's
     stalls land on a few requests' TTFT, which no replay has, and they pull the mean
     (real vLLM CPU, a run whose fitted mean put its own TTFT p50 +80 % off; fitted to
     the median, five fits each predicting the next run at another budget: errors
     −4, −3, −5, −1, −30 % against −6, −2, +4, −9, +11 % — the −30 % a pair whose
     measured TTFT rose 133 %, the machine's). The replays' pooled phases
     (``PHASE_REQUESTS``) keep the replayed median from jumping between requests.
   For such a server the per-step overhead also takes the decode residuals' mean
   (the fitted steps' mean below the gaps'): the machine's mean lateness per step, which
   a median regression leaves out. A step of the replay lasts that much longer on
   average, and a prompt cut into more chunks (a smaller budget) waits it once per
   chunk step; the jitter below is the residuals less that mean, so the ITL quantiles
   are the same gaps as before.
3. **Tails**: a replay's gaps are the model's deterministic steps; the run's are those
   plus what the machine added. Every replayed gap is widened by the step jitter (each
   gap plus each of ``JITTER_QUANTILES`` quantiles of the residuals) before its ITL
   quantiles are taken: ITL p99 is where a step carrying a chunk meets the machine's
   stalls, and neither alone sets it.

A replay moves in steps: when a small change of a parameter moves one request's prefill
into the next step, every figure jumps. Where an arrival falls between two of the
engine's steps is chance in a real run, so each figure is pooled over replays whose
recorded arrivals are each moved by a random offset within one decode step (the same
offsets at every trial value; ``PHASE_REQUESTS``), which turns one replay's few large
jumps into many small ones. The server's step means are fitted as means (its clock has
no stalls of the client's); a client's TTFT as its median (above).

The client's TTFT p50 (where it is not the fit's target), its ITL p50 and p99 and the
server's mean ITL are the checks, reported with the fitted figures as predicted vs
measured and their relative error. ``holdout`` is the honest check: the fitted figures
predict another run (another chunk budget or load, its own engine read as the calibrated
run's) that the fit never saw, and the error is reported per metric.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np

from perfmodel.config import EngineConfig
from perfmodel.costmodel import CostModel
from runfmt.calibration import Calibration, FitFigures, FittedSettings, Holdout
from runfmt.codec import frozen_map
from runfmt.metrics import SIM_HOLDOUT, TTFT, stat_name
from runfmt.run import Run, open_run
from runtime.quantiles import quantiles
from session.calibrate_decode import decode_gaps, fit_decode
from session.calibrate_reading import (
    CHUNK_KINDS,
    client_warning,
    measure_run,
    read_run,
    table_first,
)
from session.calibrate_target import TargetConfig, described, target_config
from session.sim_workload import SimWorkload, from_run
from simengine.core import EngineCore
from simengine.driver import VirtualDriver
from workloads.errors import InputError

TOLERANCE = 0.02
BISECTIONS = 14
MFU_RANGE = (0.01, 1.0)
EFFICIENCY_RANGE = (0.01, 1.0)
#: Rounds of the fit to the server's step means (prefill MFU, then bandwidth efficiency),
#: and a later round's bracket (× or ÷ ``NEAR``) and bisections.
STEP_ROUNDS, NEAR, NEAR_BISECTIONS = 2, 1.25, 8
#: Replays pooled per figure: enough for ``PHASE_REQUESTS`` replayed requests, at most
#: ``MAX_PHASES`` (a run of that many requests or more is replayed once).
PHASE_REQUESTS, MAX_PHASES = 128, 16
#: Quantiles of the step jitter each replayed gap is widened by: each stands for an equal
#: share of the residuals (the midpoints ``(i + ½) / n``), so that no single residual —
#: the largest stall, say — weighs more than its share in the widened gaps' tail.
JITTER_QUANTILES = 200
#: Replayed gaps widened at most (an evenly spaced subset of the sorted gaps beyond).
MAX_WIDENED_GAPS = 20_000

#: Where the decode fit's figures came from, unless held to the server's decode steps.
DECODE_SOURCE = "client: pure-decode token gaps (median regression)"


def decode_source(held_to: str | None) -> str:
    """Where the decode fit's figures came from: the client's gaps, held to the server's
    mean decode step (``held_to``: the metric it was read from) when it was."""
    if held_to is None:
        return DECODE_SOURCE
    return f"client: pure-decode token gaps, held to {held_to} (mean)"


def phase_offsets(workload: SimWorkload, step_s: float, seed: int = 0) -> np.ndarray:
    """Per replay (rows) and recorded arrival (columns), how far to move the arrival:
    within one decode step, drawn once, so that every trial value of a parameter is
    replayed with the same offsets."""
    phases = max(1, min(MAX_PHASES, -(-PHASE_REQUESTS // max(1, len(workload)))))
    arrivals = len(workload.start()[0])
    return np.random.default_rng(seed).uniform(0.0, step_s, size=(phases, arrivals))


def jitter_quantiles(residuals_s: np.ndarray) -> list[float]:
    """The step jitter as ``JITTER_QUANTILES`` quantiles at equal shares' midpoints
    (seconds): the residuals' distribution in ``JITTER_QUANTILES`` equally likely values.
    The end points 0 and 1 would give the smallest and largest residual a share of
    ``1 / JITTER_QUANTILES`` each, far above theirs in a run of hundreds of gaps, and
    the largest stall would then set the widened gaps' p99 by itself."""
    if residuals_s.size == 0:
        return [0.0]
    probabilities = (np.arange(JITTER_QUANTILES) + 0.5) / JITTER_QUANTILES
    return [float(q) for q in quantiles(residuals_s, tuple(probabilities))]


def widened(gaps: np.ndarray, jitter_s: np.ndarray) -> np.ndarray:
    """Every gap plus every jitter quantile (none below 0): the gaps the machine makes."""
    if gaps.size > MAX_WIDENED_GAPS:
        gaps = np.sort(gaps)[np.linspace(0, gaps.size - 1, MAX_WIDENED_GAPS).astype(int)]
    return np.maximum((gaps[:, None] + jitter_s[None, :]).ravel(), 0.0)


def replay(
    config: EngineConfig,
    workload: SimWorkload,
    offsets: np.ndarray,
    transport_s: float = 0.0,
    jitter_s: Collection[float] = (0.0,),
) -> FitFigures:
    """The workload replayed on ``config``, once per row of ``offsets`` (every recorded
    arrival moved by its own offset): a run's ``FitFigures`` over all replays pooled,
    each TTFT plus ``transport_s`` and the gaps widened by ``jitter_s``."""
    ttfts, gaps, decode, chunk, chunk_tokens = [], [], [], [], []
    for shift in offsets:
        arrivals, release = workload.start()
        arrivals = [(t + dt, req) for (t, req), dt in zip(arrivals, shift, strict=True)]
        result = VirtualDriver(EngineCore(config)).run(arrivals, release=release)
        done = [t for t in result.requests.values() if t.token_times]
        ttfts.extend(t.ttft_s for t in done)
        gaps.extend(np.diff(t.token_times) for t in done)
        decode.extend(s.duration_s for s in result.steps if s.kind == "decode")
        chunk.extend(s.duration_s for s in result.steps if s.kind in CHUNK_KINDS)
        chunk_tokens.extend(
            s.prefill_tokens + s.decode_tokens for s in result.steps if s.kind in CHUNK_KINDS
        )
    ttft = np.array(ttfts, dtype=float) + transport_s
    gap = np.concatenate(gaps or [np.array([])])
    gap = gap[gap > 0]  # the client's rule: a chunk's later tokens came with its first
    if gap.size == 0:
        raise InputError("--calibrate", "the replay produced no token gaps to fit")
    seen = widened(gap, np.asarray(jitter_s, dtype=float))
    p50, p99 = quantiles(seen, (0.5, 0.99))
    return FitFigures(
        ttft_p50=float(np.median(ttft)),
        itl_p50=float(p50),
        itl_p99=float(p99),
        decode_step_mean=float(np.mean(decode)) if decode else None,
        itl_mean=float(np.mean(seen)),
        ttft_mean=float(ttft.mean()),
        chunk_step_mean=float(np.mean(chunk)) if chunk else None,
        chunk_token_s=float(np.sum(chunk) / np.sum(chunk_tokens)) if chunk else None,
    )


def _bisect(lo: float, hi: float, below: Callable[[float], bool], steps: int = BISECTIONS) -> float:
    """The value in [lo, hi] where ``below(x)`` (x is under the solution) turns false,
    on a log scale when ``lo`` > 0."""

    def middle(a: float, b: float) -> float:
        return (a * b) ** 0.5 if a > 0 else (a + b) / 2

    for _ in range(steps):
        mid = middle(lo, hi)
        if below(mid):
            lo = mid
        else:
            hi = mid
    return middle(lo, hi)


def _near(value: float, bounds: tuple[float, float]) -> tuple[float, float]:
    """A later round's bracket: within ``NEAR`` of the last round's value."""
    return max(bounds[0], value / NEAR), min(bounds[1], value * NEAR)


def calibrate(run: Run | Path, user: EngineConfig, given: Collection[str] = ()) -> Calibration:
    """Fit the engine ``run`` was measured on (``session.calibrate_target``: what the run
    recorded, the keys of ``given`` taken from ``user``) to the run; the fitted config,
    its fit error, and the replay. ``InputError`` when the run's plan cannot be rebuilt
    (``session.sim_workload.from_run``): other prompts would fit another model."""
    run = table_first(run if isinstance(run, Run) else open_run(run, "--calibrate"))
    target = target_config(run, user, given)
    base = target.config
    workload = from_run(run, base.vocab_size, argument="--calibrate")
    reading = read_run(run)
    measured = measure_run(reading)
    server_steps = measured.decode_step_mean is not None and measured.chunk_token_s is not None
    fitted_decode = fit_decode(
        decode_gaps(reading.spans, reading.gaps),
        CostModel.from_config(base),
        measured.decode_step_mean,
        free_step_overhead=not server_steps,
    )
    if fitted_decode is None:
        raise InputError("--calibrate", f"{run.path} has no pure-decode gap to fit the decode to")
    decode, residuals = fitted_decode
    fitted: dict[str, float] = {
        "bandwidth_efficiency": decode.bandwidth_efficiency,
        "host_overhead_per_seq_s": decode.host_overhead_per_seq_s,
    }
    lateness = 0.0
    if not server_steps:
        # the median regression's residuals average above zero (a loaded machine's late
        # steps); every step pays that mean, and a prompt pays it once per chunk step
        lateness = max(0.0, decode.step_mean_measured_s - decode.step_mean_fitted_s)
        fitted["host_overhead_step_s"] = (
            base.host_overhead_step_s + decode.step_overhead_added_s + lateness
        )
    transport = reading.transport_s
    jitter = jitter_quantiles(residuals - lateness)
    offsets = phase_offsets(workload, measured.itl_p50)

    def figures(**changes: float) -> FitFigures:
        config = dataclasses.replace(base, **(fitted | changes))
        return replay(config, workload, offsets, transport)

    if server_steps:  # the server's own means: no client in between
        targets = ["chunk_step_mean", "decode_step_mean"]
        for round_ in range(STEP_ROUNDS):
            mfu, eff, steps = MFU_RANGE, EFFICIENCY_RANGE, BISECTIONS
            if round_:
                mfu, eff = (
                    _near(fitted["prefill_mfu"], mfu),
                    _near(fitted["bandwidth_efficiency"], eff),
                )
                steps = NEAR_BISECTIONS
            fitted["prefill_mfu"] = _bisect(
                *mfu,
                lambda x: figures(prefill_mfu=x).chunk_step_mean > measured.chunk_step_mean,
                steps,
            )
            fitted["bandwidth_efficiency"] = _bisect(
                *eff,
                lambda x: (
                    figures(bandwidth_efficiency=x).decode_step_mean > measured.decode_step_mean
                ),
                steps,
            )
    else:
        targets = [stat_name(TTFT, "p50")]
        fitted["prefill_mfu"] = _bisect(
            *MFU_RANGE, lambda x: figures(prefill_mfu=x).ttft_p50 > measured.ttft_p50
        )
    config = dataclasses.replace(base, **fitted)
    predicted = replay(config, workload, offsets, transport, jitter)
    warning = client_warning(reading, run)
    return Calibration(
        run=str(run.path),
        requests=len(workload),
        prompts=workload.prompts,
        target=described(target),
        target_sources=frozen_map(target.sources),
        fitted=FittedSettings(**fitted),
        decode_fit=decode,
        config=frozen_map(dataclasses.asdict(config)),
        transport_s=transport,
        step_jitter_s=tuple(jitter),
        measured=measured,
        predicted=predicted,
        relative_error=predicted.errors(measured),
        fit_targets=tuple(targets),
        decode_source=decode_source(
            reading.server.decode_step_source if decode.anchored is not None else None
        ),
        itl_source=reading.server.itl_source,
        tolerance=TOLERANCE,
        warnings=(warning,) if warning else (),
    )


#: The metrics the held-out check is judged on, and its goal (relative error).
HOLDOUT_METRICS, HOLDOUT_GOAL = SIM_HOLDOUT, 0.10
#: A tail's goal (ITL p99: its ~1 % of a short run's gaps move with the machine's stalls).
TAIL_GOAL = 0.25


def _goal(metric: str) -> float:
    return TAIL_GOAL if metric.endswith("p99") else HOLDOUT_GOAL


def holdout(
    run: Run | Path,
    user: EngineConfig,
    given: Collection[str],
    calibration: Calibration,
) -> Holdout:
    """Predict a run the fit never saw: the engine it was measured on (its ``run.json``,
    the keys of ``given`` from ``user``: ``--engine`` and ``--holdout-engine``) with the
    calibration's fitted figures, its transport and step jitter; its recorded requests
    replayed on it and compared."""
    run = table_first(run if isinstance(run, Run) else open_run(run, "--holdout"))
    target: TargetConfig = target_config(run, user, given, "--holdout-engine")
    config = dataclasses.replace(target.config, **calibration.fitted.settings())
    workload = from_run(run, config.vocab_size, argument="--holdout")
    reading = read_run(run, "--holdout")
    measured = measure_run(reading)
    predicted = replay(
        config,
        workload,
        phase_offsets(workload, measured.itl_p50),
        calibration.transport_s,
        calibration.step_jitter_s,
    )
    error = predicted.errors(measured)
    warning = client_warning(reading, run)
    return Holdout(
        run=str(run.path),
        requests=len(workload),
        target=described(target),
        max_num_batched_tokens=config.max_num_batched_tokens,
        measured=measured,
        predicted=predicted,
        relative_error=error,
        goal=HOLDOUT_GOAL,
        goals=frozen_map({k: _goal(k) for k in HOLDOUT_METRICS}),
        within_goal=frozen_map(
            {k: error[k] is not None and abs(error[k]) <= _goal(k) for k in HOLDOUT_METRICS}
        ),
        warnings=(warning,) if warning else (),
    )
