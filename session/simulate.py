"""``prefillscope simulate``: the engine core on a virtual clock, over a grid of configurations.

Every configuration replays the same workload (:mod:`session.sim_workload`) through fresh
engines: monolithic (``replicas`` engines, the workload dealt round-robin) or disaggregated
(``P:D`` prefill and decode workers joined by the modelled KV link). With ``gpus`` set,
every configuration gets that many GPUs: monolithic runs ``gpus / tp`` replicas and a
``P:D`` ratio is scaled to ``k·P : k·D`` with ``k·(P+D)·tp = gpus``.

Per configuration: TTFT, ITL, TPOT and E2E as bench's ``summary.json`` has them (mean,
p50 … p99.9 and max, by ``probes.latency``'s code: the same TPOT formula, per-token gap
rule and SLO rule), goodput under the SLO (the share of requests meeting every bound:
TTFT, worst gap, TPOT, E2E), output throughput over the makespan,
and the KV transfer's share of TTFT (the summed post-prefill waits over the summed TTFTs).
A configuration is on the Pareto front when no other has both a lower TTFT p99 and a
lower ITL p99. For each P/D configuration, the break-even link bandwidth is the slowest
link at which it does as well as the monolithic configuration with the same chunk budget
(and GPUs): on goodput when an SLO is given, else on TTFT p99. It is found by bisection
on a log scale within ``BREAK_EVEN_RANGE_GBPS``, each probe a full simulation.

A stop signal (Ctrl-C, SIGTERM, SIGHUP: ``runtime.signals``) ends the grid where it is:
the configurations already simulated are kept, with their front and the break-evens
found so far, and the result says ``status: interrupted`` with its ``reason``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from perfmodel.config import EngineConfig
from probes.latency import latency_columns, latency_summary, meets_slo
from probes.token_gaps import TokenGaps, gaps_of
from runfmt.codec import frozen_map
from runfmt.columns import Columns
from runfmt.metrics import ITL, TTFT
from runfmt.simresult import (
    BreakEven,
    SimConfiguration,
    SimFigures,
    SimSpeed,
    SimulateResult,
    extended,
)
from runfmt.slo import Slo
from runfmt.tables import COMPLETED_STATUS
from runtime import signals
from session.sim_workload import SimWorkload
from simengine.core import EngineCore
from simengine.disagg import transfer_wait_s
from simengine.disagg_config import DisaggConfig
from simengine.disagg_driver import simulate_disagg
from simengine.driver import RequestTiming, VirtualDriver
from simengine.kv_link import LinkSpec
from workloads.errors import InputError
from workloads.limits import Bound

BREAK_EVEN_RANGE_GBPS = (1.0, 10_000.0)
BREAK_EVEN_PROBES = 6
#: ``--gpus``: every engine of a configuration is simulated, with a KV pool of its own.
GPUS_BOUND = Bound(1, 1024, whole=True, why="each GPU's engine is simulated with its own pool")


@dataclass(frozen=True)
class GridPoint:
    """One configuration: a chunk budget, and either replicas or a P:D split."""

    budget: int
    replicas: int = 1
    ratio: tuple[int, int] | None = None

    @property
    def label(self) -> str:
        what = f"P/D {self.ratio[0]}:{self.ratio[1]}" if self.ratio else f"mono ×{self.replicas}"
        return f"{what}, chunk {self.budget}"


@dataclass
class SimulateSpec:
    """What to simulate: the base engine, the grid axes, the link and the SLO."""

    base: EngineConfig
    chunks: list[int]
    ratios: list[tuple[int, int]] = field(default_factory=list)
    gpus: int | None = None
    monolithic: bool = True
    link: LinkSpec = field(default_factory=LinkSpec)
    transfer: str = "after-prefill"
    slo: Slo = field(default_factory=Slo)
    break_even: bool = True

    def points(self) -> list[GridPoint]:
        """The grid's configurations; an uneven or oversized ``--gpus`` is refused."""
        GPUS_BOUND.check("--gpus", self.gpus)
        tp = self.base.tensor_parallel_size
        out: list[GridPoint] = []
        for budget in self.chunks:
            if self.monolithic:
                out.append(GridPoint(budget, replicas=self._scale(1, tp, "monolithic")))
            for p, d in self.ratios:
                k = self._scale(p + d, tp, f"{p}:{d}")
                out.append(GridPoint(budget, ratio=(k * p, k * d)))
        return out

    def _scale(self, engines: int, tp: int, what: str) -> int:
        if self.gpus is None:
            return 1
        k, rest = divmod(self.gpus, engines * tp)
        if rest or k == 0:
            raise InputError(
                "--gpus",
                f"{self.gpus} GPUs cannot be split evenly for {what} "
                f"({engines} engine(s) × tp {tp} each)",
                f"use a multiple of {engines * tp}",
            )
        return k


def run_point(spec: SimulateSpec, point: GridPoint, workload: SimWorkload) -> SimConfiguration:
    """Simulate one configuration; its figures (see the module docstring)."""
    config = dataclasses.replace(spec.base, max_num_batched_tokens=point.budget)
    if config.max_num_seqs > point.budget:
        config = dataclasses.replace(config, max_num_seqs=point.budget)
    t0 = time.perf_counter()
    waits: list[float] = []
    timings: list[RequestTiming] = []
    if point.ratio is None:
        for part in workload.split(point.replicas):
            arrivals, release = part.start()
            result = VirtualDriver(EngineCore(config)).run(
                arrivals, record_steps=False, release=release
            )
            timings.extend(result.requests.values())
    else:
        disagg = DisaggConfig(*point.ratio, spec.link, spec.transfer)
        arrivals, release = workload.start()
        result = simulate_disagg(config, disagg, arrivals, record_steps=False, release=release)
        timings.extend(result.requests.values())
        waits = [transfer_wait_s(job) for job in result.jobs]
    wall = time.perf_counter() - t0
    gpus = (sum(point.ratio) if point.ratio else point.replicas) * config.tensor_parallel_size
    return extended(
        SimConfiguration,
        summarize(timings, waits, spec.slo),
        label=point.label,
        chunk=point.budget,
        disaggregate=f"{point.ratio[0]}:{point.ratio[1]}" if point.ratio else None,
        replicas=point.replicas if point.ratio is None else None,
        gpus=gpus,
        wall_s=wall,
    )


def timing_columns(timings: list[RequestTiming]) -> tuple[Columns, TokenGaps]:
    """Simulated requests as bench's per-request columns (``probes.latency.latency_columns``
    reads them) and their per-token gaps (``probes.token_gaps.gaps_of``: one token per
    chunk): so a simulation is summarised by bench's code, not a second one."""
    n = len(timings)
    counts = np.fromiter((len(t.token_times) for t in timings), dtype=np.int64, count=n)
    arrival = np.fromiter((t.arrival_s for t in timings), dtype=float, count=n)
    first = np.fromiter(
        (t.token_times[0] if t.token_times else np.nan for t in timings), dtype=float, count=n
    )
    done = np.fromiter(
        (t.finish_reason is not None and bool(t.token_times) for t in timings), bool, count=n
    )
    last = np.fromiter(
        (t.token_times[-1] if t.token_times else np.nan for t in timings), dtype=float, count=n
    )
    end = np.where(done, last, np.nan)
    ids = np.arange(n)
    requests = Columns(
        {
            "id": ids,
            "intended_s": arrival,
            "sent_s": arrival,
            "first_token_s": first,
            "end_s": end,
            "output_tokens": counts.astype(float),
            "status": np.where(done, COMPLETED_STATUS, "error").astype(object),
        }
    )
    kept = done & (counts > 0)
    times = np.fromiter(
        itertools.chain.from_iterable(
            t.token_times for t, k in zip(timings, kept, strict=True) if k
        ),
        dtype=float,
        count=int(counts[kept].sum()),
    )
    codes = np.repeat(ids[kept], counts[kept])
    gaps = gaps_of(codes, times, np.ones(times.size, dtype=np.int64), ids)
    return requests, gaps


def summarize(timings: list[RequestTiming], waits: list[float], slo: Slo) -> SimFigures:
    """Bench's latency figures (``probes.latency.latency_summary``: TTFT, ITL, TPOT, E2E,
    each mean, p50 … p99.9 and max), goodput by bench's rule (``meets_slo``), throughput
    and the KV transfer's share of TTFT, of a set of simulated requests."""
    requests, gaps = timing_columns(timings)
    latencies = latency_columns(requests)
    ok = np.asarray(latencies["ok"], dtype=bool)
    ttft = np.asarray(latencies[TTFT.key])[ok]
    tokens = int(np.asarray(requests["output_tokens"])[ok].sum())
    start = min((t.arrival_s for t in timings), default=0.0)
    end = float(np.nanmax(requests["end_s"])) if ok.any() else start
    good = meets_slo(latencies, gaps.per_request("max"), slo) if slo else None
    wait_sum = float(np.nansum([max(0.0, w) for w in waits])) if waits else 0.0
    return SimFigures(
        requests=len(timings),
        completed=int(ok.sum()),
        rejected=sum(1 for t in timings if t.error is not None),
        latencies=frozen_map(latency_summary(latencies, gaps)),
        goodput=int(good.sum()) / len(timings) if good is not None and timings else None,
        output_tokens_per_s=tokens / (end - start) if end > start else None,
        kv_transfer_share_of_ttft=wait_sum / float(ttft.sum()) if ttft.sum() > 0 else 0.0,
        output_tokens=tokens,
    )


def pareto(rows: Sequence[SimConfiguration]) -> list[SimConfiguration]:
    """The rows, ``pareto`` marked on those no other row beats on both TTFT p99 and ITL
    p99."""

    def key(row: SimConfiguration) -> tuple[float, float]:
        ttft, itl = row.statistic(TTFT.key, "p99"), row.statistic(ITL.key, "p99")
        return (math.inf if ttft is None else ttft, math.inf if itl is None else itl)

    keys = [key(row) for row in rows]
    return [
        dataclasses.replace(
            row, pareto=not any(b[0] <= a[0] and b[1] <= a[1] and b != a for b in keys)
        )
        for row, a in zip(rows, keys, strict=True)
    ]


def _score(row: SimFigures, slo: Slo) -> float:
    """What break-even compares (higher is better): goodput under an SLO, else −TTFT p99."""
    if slo:
        return row.goodput or 0.0
    ttft = row.statistic(TTFT.key, "p99")
    return -math.inf if ttft is None else -ttft


def break_even_gbps(
    spec: SimulateSpec, point: GridPoint, workload: SimWorkload, target: float
) -> BreakEven:
    """The slowest link at which ``point`` scores at least ``target`` (see ``_score``)."""

    def score_at(gbps: float) -> float:
        probe = dataclasses.replace(spec, link=dataclasses.replace(spec.link, gbps=gbps))
        return _score(run_point(probe, point, workload), spec.slo)

    what = "goodput" if spec.slo else "TTFT p99"
    lo, hi = BREAK_EVEN_RANGE_GBPS
    if score_at(hi) < target:
        return BreakEven(None, None, f"{what} worse than monolithic even at {hi:,.0f} Gb/s")
    if score_at(lo) >= target:
        return BreakEven(lo, None, f"{what} as good as monolithic at {lo:g} Gb/s already")
    for _ in range(BREAK_EVEN_PROBES):
        mid = math.sqrt(lo * hi)
        if score_at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return BreakEven(hi, (lo, hi), f"{what} matches monolithic between {lo:.3g} and {hi:.3g} Gb/s")


def _break_evens(
    spec: SimulateSpec, points: list[GridPoint], rows: list[SimConfiguration], workload: SimWorkload
) -> None:
    """Each P/D row's break-even link against the monolithic row of its chunk budget, set
    in ``rows`` as each is found (a stop signal keeps those found)."""
    mono = {row.chunk: row for row in rows if row.disaggregate is None}
    for i, (point, row) in enumerate(zip(points, rows, strict=True)):
        base = mono.get(point.budget)
        if spec.break_even and point.ratio and base is not None:
            found = break_even_gbps(spec, point, workload, _score(base, spec.slo))
            rows[i] = dataclasses.replace(row, break_even=found)


#: Called as each configuration is done: (configurations done, planned, its row).
OnPoint = Callable[[int, int, SimConfiguration], None]


def simulate_grid(
    spec: SimulateSpec, workload: SimWorkload, on_point: OnPoint | None = None
) -> SimulateResult:
    """Every configuration of the grid over ``workload``: the rows, the front, break-evens.

    A stop signal keeps what was done (see the module docstring)."""
    spec.base.validate()
    spec.link.validate()
    if not len(workload):
        raise InputError("--workload", "the workload has no request to simulate")
    points = spec.points()
    rows: list[SimConfiguration] = []
    reason = None
    t0 = time.perf_counter()
    try:
        for point in points:
            rows.append(run_point(spec, point, workload))
            if on_point is not None:
                on_point(len(rows), len(points), rows[-1])
    except KeyboardInterrupt:  # a stop signal: the configurations done are the result
        reason = signals.stop_reason()
    grid_wall = time.perf_counter() - t0
    rows = pareto(rows)
    if reason is None:
        try:
            _break_evens(spec, points, rows, workload)
        except KeyboardInterrupt:  # likewise: the break-evens found so far are kept
            reason = signals.stop_reason()
    simulated_tokens = sum(row.output_tokens for row in rows)
    return SimulateResult(
        status="complete" if reason is None else "interrupted",
        reason=reason,
        planned_configurations=len(points),
        model=spec.base.model,
        gpu=spec.base.gpu,
        link=frozen_map(dataclasses.asdict(spec.link)),
        kv_transfer=spec.transfer,
        slo=spec.slo,
        requests=len(workload),
        configurations=tuple(rows),
        speed=SimSpeed(
            grid_wall_s=grid_wall,
            requests_per_s=len(workload) * len(rows) / grid_wall if grid_wall else None,
            output_tokens_per_s=simulated_tokens / grid_wall if grid_wall else None,
        ),
    )
