"""``simulate --calibrate RUN_DIR``: fit the cost model to a measured run, then replay it.

Three figures of the cost model are fitted to the run:

1. the **decode**: ``bandwidth_efficiency`` (the fraction of the memory-bandwidth roofline
   a decode step reaches) and ``host_overhead_per_seq_s`` (what each running sequence
   adds to a step), by a median regression of the run's pure-decode gaps on the step's
   roofline seconds and its number of sequences, held to the server's own mean decode
   step where it has one (``session.calibrate_decode``: how, and how well it fits);
2. the **prefill** to the client's mean TTFT: ``prefill_mfu`` within ``MFU_RANGE``, by
   bisection on replays of the run's recorded requests (send times, prompt and output
   lengths) on the virtual clock with the decode figures fitted.

A replay moves in steps: when a small change of a parameter moves one request's prefill
into the next step, every figure jumps. Where an arrival falls between two of the
engine's steps is chance in a real run, so each figure is pooled over replays whose
recorded arrivals are each moved by a random offset within one decode step (the same
offsets at every trial value; ``PHASE_REQUESTS``), which turns one replay's few large
jumps into many small ones. The TTFT is fitted by its mean, not its median: the median
of 16 requests jumped from one request's TTFT to another's (17 %, so that no MFU came
within the tolerance), and one replay's mean by up to 3 %; the pooled mean by under
0.2 % (ten runs of the planted test under three CPU hogs).

The client's TTFT p50, its ITL p50 and p99 and the server's mean ITL (vLLM's histogram
sum ÷ count, exact; else the client's mean gap) are the checks, reported with the fitted
figures as predicted vs measured and their relative error. ``holdout`` is the honest
check: the fitted figures predict another run (another chunk budget or load) that the
fit never saw, and the error is reported per metric.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.config import EngineConfig
from perfmodel.costmodel import CostModel
from probes.latency import request_latencies
from probes.metric_registry import ITL, SIM_HOLDOUT, TTFT, stat_name
from probes.token_gaps import TokenGaps, token_gaps
from runfmt.run import Run, open_run
from runfmt.tables import RunTables
from runtime.quantiles import quantiles
from session.calibrate_decode import RequestSpans, decode_gaps, fit_decode, request_spans
from session.sim_workload import SimWorkload, from_run
from simengine.core import EngineCore
from simengine.driver import VirtualDriver
from workloads.errors import InputError

TOLERANCE = 0.02
BISECTIONS = 14
MFU_RANGE = (0.01, 1.0)
#: Replays pooled per figure: enough for ``PHASE_REQUESTS`` replayed requests, at most
#: ``MAX_PHASES`` (a run of that many requests or more is replayed once).
PHASE_REQUESTS, MAX_PHASES = 128, 16


STEP_METRIC = "prefillscope_engine_step_seconds"
ITL_METRIC = "vllm:inter_token_latency_seconds"
#: The server's own mean ITL, as the measured figures name it.
ITL_MEAN = stat_name(ITL, "mean")
#: Where the decode fit's figures came from: the client's gaps alone, or held to the
#: server's mean pure-decode step.
DECODE_SOURCE = {
    False: "client: pure-decode token gaps (median regression)",
    True: f'client: pure-decode token gaps, held to {STEP_METRIC}{{kind="decode"}} (mean)',
}


@dataclass(frozen=True)
class Measured:
    ttft_p50: float
    itl_p50: float
    itl_p99: float
    #: Mean pure-decode step (the server's own clock), when the server exposes it.
    decode_step_mean: float | None = None
    #: Mean gap between tokens: the server's (vLLM's histogram sum ÷ count), else the client's.
    itl_mean: float | None = None
    #: Mean time to first token: what the prefill is fitted to.
    ttft_mean: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return dataclasses.asdict(self)


def _server_histograms(tables: RunTables) -> dict[str, float]:
    """What the server's own clock says: the embedded engine's mean pure-decode step and
    the mean gap between tokens (vLLM's ITL histogram), each as sum ÷ count (exact, where
    a quantile is only as fine as the histogram's buckets)."""
    from diagnose.raw_metrics import RawMetrics

    try:
        raw = RawMetrics(tables.server_metrics)
    except (OSError, ValueError, KeyError):
        return {}
    figures = {}
    for key, metric, labels in (
        ("decode_step_mean", STEP_METRIC, {"kind": "decode"}),
        (ITL_MEAN, ITL_METRIC, None),
    ):
        hist = raw.histogram_increase(metric, labels)
        if hist is not None and hist.count and hist.sum > 0:
            figures[key] = hist.sum / hist.count
    return figures


@dataclass(frozen=True)
class RunReading:
    """What calibration reads of a run: its measured, completed requests, their gaps,
    the spans the decode fit needs and the server's histogram figures."""

    ttft_s: np.ndarray
    gaps: TokenGaps
    spans: RequestSpans
    server: dict[str, float]


def read_run(run: Run, flag: str = "--calibrate") -> RunReading:
    """The one place calibration reads a run (opened once: ``runfmt.run.open_run``)."""
    tables = run.tables
    try:
        measured, chunks = tables.measured, tables.chunks
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(flag, f"cannot read the run {run.path}: {exc}") from None
    latencies = request_latencies(measured)
    ok = latencies["ok"].astype(bool).to_numpy()
    ttft = latencies.loc[ok, "ttft_s"].dropna().to_numpy(dtype=float)
    gaps = token_gaps(chunks, latencies.loc[ok, "id"])
    if ttft.size == 0 or gaps.gap_s.size == 0:
        raise InputError(flag, f"{run.path} has no completed request with token gaps")
    spans = request_spans(measured[ok], gaps, chunks)
    return RunReading(ttft, gaps, spans, _server_histograms(tables))


def measure_run(reading: RunReading) -> Measured:
    """The run's client-side TTFT p50 and mean, ITL p50/p99 (and the server's figures)
    over its measured, completed requests."""
    gaps = reading.gaps.gap_s
    p50, p99 = quantiles(gaps, (0.5, 0.99))
    return Measured(
        float(np.median(reading.ttft_s)),
        float(p50),
        float(p99),
        reading.server.get("decode_step_mean"),
        reading.server.get(ITL_MEAN, float(np.mean(gaps))),
        float(np.mean(reading.ttft_s)),
    )


def phase_offsets(workload: SimWorkload, step_s: float, seed: int = 0) -> np.ndarray:
    """Per replay (rows) and recorded arrival (columns), how far to move the arrival:
    within one decode step, drawn once, so that every trial value of a parameter is
    replayed with the same offsets."""
    phases = max(1, min(MAX_PHASES, -(-PHASE_REQUESTS // max(1, len(workload)))))
    arrivals = len(workload.start()[0])
    return np.random.default_rng(seed).uniform(0.0, step_s, size=(phases, arrivals))


def replay(config: EngineConfig, workload: SimWorkload, offsets: np.ndarray) -> Measured:
    """The workload replayed on ``config``, once per row of ``offsets`` (every recorded
    arrival moved by its own offset): the figures of ``Measured`` over all replays pooled."""
    ttfts, gaps, decode = [], [], []
    for shift in offsets:
        arrivals, release = workload.start()
        arrivals = [(t + dt, req) for (t, req), dt in zip(arrivals, shift, strict=True)]
        result = VirtualDriver(EngineCore(config)).run(arrivals, release=release)
        done = [t for t in result.requests.values() if t.token_times]
        ttfts.extend(t.ttft_s for t in done)
        gaps.extend(np.diff(t.token_times) for t in done)
        decode.extend(s.duration_s for s in result.steps if s.kind == "decode")
    ttft = np.array(ttfts, dtype=float)
    gap = np.concatenate(gaps or [np.array([])])
    if gap.size == 0:
        raise InputError("--calibrate", "the replay produced no token gaps to fit")
    p50, p99 = quantiles(gap, (0.5, 0.99))
    step = float(np.mean(decode)) if decode else None
    return Measured(
        float(np.median(ttft)),
        float(p50),
        float(p99),
        step,
        float(np.mean(gap)),
        float(ttft.mean()),
    )


def _bisect(lo: float, hi: float, too_low, rising: bool = True) -> float:
    """The value in [lo, hi] where the figure crosses its target (``too_low(x)``: the
    figure at x is below target), on a log scale when ``lo`` > 0."""
    for _ in range(BISECTIONS):
        mid = (lo * hi) ** 0.5 if lo > 0 else (lo + hi) / 2
        if too_low(mid) == rising:
            lo = mid
        else:
            hi = mid
    return (lo * hi) ** 0.5 if lo > 0 else (lo + hi) / 2


def _relative_errors(predicted: Measured, measured: Measured) -> dict[str, float | None]:
    return {
        k: (getattr(predicted, k) - v) / v if v and getattr(predicted, k) is not None else None
        for k, v in measured.as_dict().items()
    }


def calibrate(run: Run | Path, base: EngineConfig) -> dict[str, Any]:
    """Fit ``base`` to the run (a ``Path`` is opened as ``--calibrate``); the fitted
    config, its fit error, and the replay. ``InputError`` when the run's plan cannot be
    rebuilt (``session.sim_workload.from_run``): other prompts would fit another model."""
    run = run if isinstance(run, Run) else open_run(run, "--calibrate")
    workload = from_run(run, base.vocab_size, argument="--calibrate")
    reading = read_run(run)
    measured = measure_run(reading)
    offsets = phase_offsets(workload, measured.itl_p50)
    decode = fit_decode(
        decode_gaps(reading.spans, reading.gaps),
        CostModel.from_config(base),
        measured.decode_step_mean,
    )
    if decode is None:
        raise InputError("--calibrate", f"{run.path} has no pure-decode gap to fit the decode to")
    fitted: dict[str, float] = {
        "bandwidth_efficiency": decode.bandwidth_efficiency,
        "host_overhead_per_seq_s": decode.host_overhead_per_seq_s,
    }
    config = dataclasses.replace(base, **fitted)

    def with_(**changes: float) -> EngineConfig:
        return dataclasses.replace(config, **changes)

    mfu = _bisect(
        *MFU_RANGE,
        lambda x: replay(with_(prefill_mfu=x), workload, offsets).ttft_mean > measured.ttft_mean,
    )
    config = with_(prefill_mfu=mfu)
    fitted["prefill_mfu"] = mfu
    predicted = replay(config, workload, offsets)
    return {
        "run": str(run.path),
        "requests": len(workload),
        "prompts": workload.prompts,
        "fitted": fitted,
        "decode_fit": decode.as_dict(),
        "config": dataclasses.asdict(config),
        "measured": measured.as_dict(),
        "predicted": predicted.as_dict(),
        "relative_error": _relative_errors(predicted, measured),
        "fit_targets": [stat_name(TTFT, "mean")],
        "decode_source": DECODE_SOURCE[decode.anchored is not None],
        "tolerance": TOLERANCE,
    }


#: The metrics the held-out check is judged on, and its goal (relative error).
HOLDOUT_METRICS, HOLDOUT_GOAL = SIM_HOLDOUT, 0.10


def holdout(run: Run | Path, config: EngineConfig) -> dict[str, Any]:
    """Predict a run the fit never saw: replay its recorded requests on ``config`` (the
    fitted figures on that run's own settings, e.g. its chunk budget) and compare."""
    run = run if isinstance(run, Run) else open_run(run, "--holdout")
    workload = from_run(run, config.vocab_size, argument="--holdout")
    measured = measure_run(read_run(run, "--holdout"))
    predicted = replay(config, workload, phase_offsets(workload, measured.itl_p50))
    error = _relative_errors(predicted, measured)
    return {
        "run": str(run.path),
        "requests": len(workload),
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "measured": measured.as_dict(),
        "predicted": predicted.as_dict(),
        "relative_error": error,
        "goal": HOLDOUT_GOAL,
        "within_goal": {
            k: error[k] is not None and abs(error[k]) <= HOLDOUT_GOAL for k in HOLDOUT_METRICS
        },
    }
