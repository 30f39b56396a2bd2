"""``simulate --calibrate RUN_DIR``: fit the cost model to a measured run, then replay it.

The run's recorded requests (send times, prompt and output lengths) are replayed on the
virtual clock while two figures of the cost model are fitted, each by bisection on a
quantity it moves monotonically:

1. the **decode step** to the embedded engine's mean pure-decode step
   (``prefillscope_engine_step_seconds{kind="decode"}``, the server's clock), else to the
   client's ITL p50 (vLLM 0.32 has no step-time histogram, and its inter-token latency
   buckets are too coarse for a median: 5–10 ms is one bucket) — by the per-step
   host overhead (``host_overhead_step_s``, up from 0), or, when even none gives steps
   longer than measured, the HBM ``bandwidth_efficiency`` (up to 1);
2. the **prefill** to the client's mean TTFT: ``prefill_mfu`` within ``MFU_RANGE``.

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
figures as predicted vs measured and their relative error; the server's clock is the
fit's target where it has one because the client's gaps also carry the network and the
client's own delays. The fitted figures land within ``TOLERANCE`` unless a bound of their
parameter is hit (the error says so).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.config import EngineConfig
from probes.latency import request_latencies
from probes.token_gaps import token_gaps
from runfmt.run import Run, open_run
from runfmt.tables import RunTables
from session.sim_workload import SimWorkload, from_run
from simengine.core import EngineCore
from simengine.driver import VirtualDriver
from workloads.errors import InputError

TOLERANCE = 0.02
BISECTIONS = 14
MFU_RANGE = (0.01, 1.0)
MAX_OVERHEAD_S = 1.0
#: Replays pooled per figure: enough for ``PHASE_REQUESTS`` replayed requests, at most
#: ``MAX_PHASES`` (a run of that many requests or more is replayed once).
PHASE_REQUESTS, MAX_PHASES = 128, 16


STEP_METRIC = "prefillscope_engine_step_seconds"
ITL_METRIC = "vllm:inter_token_latency_seconds"


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
        ("itl_mean", ITL_METRIC, None),
    ):
        hist = raw.histogram_increase(metric, labels)
        if hist is not None and hist.count and hist.sum > 0:
            figures[key] = hist.sum / hist.count
    return figures


def measure_run(run: Run) -> Measured:
    """The run's client-side TTFT p50 and mean, ITL p50/p99 (and the server's figures)
    over its measured, completed requests."""
    tables = run.tables
    ok = request_latencies(tables.completed)
    ttft = ok["ttft_s"].dropna().to_numpy(dtype=float)
    gaps = token_gaps(tables.chunks, ok["id"]).gap_s
    if ttft.size == 0 or gaps.size == 0:
        raise InputError("--calibrate", f"{run.path} has no completed request with token gaps")
    p50, p99 = np.percentile(gaps, [50, 99])
    server = _server_histograms(tables)
    return Measured(
        float(np.median(ttft)),
        float(p50),
        float(p99),
        server.get("decode_step_mean"),
        server.get("itl_mean", float(np.mean(gaps))),
        float(np.mean(ttft)),
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
    p50, p99 = np.percentile(gap, [50, 99])
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


def calibrate(run: Run | Path, base: EngineConfig) -> dict[str, Any]:
    """Fit ``base`` to the run (a ``Path`` is opened as ``--calibrate``); the fitted
    config, its fit error, and the replay. ``InputError`` when the run's plan cannot be
    rebuilt (``session.sim_workload.from_run``): other prompts would fit another model."""
    run = run if isinstance(run, Run) else open_run(run, "--calibrate")
    workload = from_run(run, base.vocab_size, argument="--calibrate")
    measured = measure_run(run)
    if measured.decode_step_mean is not None:
        key, target = "decode_step_mean", measured.decode_step_mean
        source = f'{STEP_METRIC}{{kind="decode"}} (mean)'
    else:  # a median needs the client's gaps: the server's ITL buckets are too coarse for it
        key, target, source = "itl_p50", measured.itl_p50, "client: token gaps (p50)"
    offsets = phase_offsets(workload, target)

    def decode_at(cfg: EngineConfig) -> float:
        value = getattr(replay(cfg, workload, offsets), key)
        return float("inf") if value is None else value

    def with_(**changes: float) -> EngineConfig:
        return dataclasses.replace(config, **changes)

    config = dataclasses.replace(base, host_overhead_step_s=0.0)
    fitted: list[str] = []
    if decode_at(config) < target:
        overhead = _bisect(
            0.0, MAX_OVERHEAD_S, lambda x: decode_at(with_(host_overhead_step_s=x)) < target
        )
        config = with_(host_overhead_step_s=overhead)
        fitted.append("host_overhead_step_s")
    else:
        efficiency = _bisect(
            config.bandwidth_efficiency,
            1.0,
            lambda x: decode_at(with_(bandwidth_efficiency=x)) > target,
        )
        config = with_(bandwidth_efficiency=efficiency)
        fitted.append("bandwidth_efficiency")
    mfu = _bisect(
        *MFU_RANGE,
        lambda x: replay(with_(prefill_mfu=x), workload, offsets).ttft_mean > measured.ttft_mean,
    )
    config = with_(prefill_mfu=mfu)
    fitted.append("prefill_mfu")
    predicted = replay(config, workload, offsets)
    error = {
        k: (getattr(predicted, k) - v) / v if v and getattr(predicted, k) is not None else None
        for k, v in measured.as_dict().items()
    }
    return {
        "run": str(run.path),
        "requests": len(workload),
        "prompts": workload.prompts,
        "fitted": {name: getattr(config, name) for name in fitted},
        "config": dataclasses.asdict(config),
        "measured": measured.as_dict(),
        "predicted": predicted.as_dict(),
        "relative_error": error,
        "fit_targets": ["ttft_mean", key],
        "decode_source": source,
        "tolerance": TOLERANCE,
    }
