"""The SLA search (``sweep --find "ttft_p99<500ms,itl_p99<50ms"``): the highest request
rate (or closed-loop concurrency) at which a run meets every bound, by bisection, each
probe judged by its statistics' bootstrap intervals (``diagnose.sla``), and the time a
sweep or a search will take, said before it starts.

**The search.** The loads given (``--rates 1,2,4,8,16``) are probed in increasing order
until one misses a bound: the highest load met and the lowest missed bracket the answer.
The bracket is then bisected (at the geometric mean for a rate, the integer middle for a
concurrency) until it is narrower than ``resolution`` (a rate's high end within
``1 + resolution`` of its low end; concurrencies one apart). Each probe is an ordinary
run directory in the search folder (``rate-5.66``). A probe is decided only by its
intervals: ``meets`` when every bound's interval lies on the good side, ``misses`` when
one lies on the bad side; an undecided probe is run once more with the requests its
intervals say would decide (at most ``MAX_GROWTH`` times the first); a probe still
undecided lies where a bound is within its statistic's interval — at the boundary, as
far as this many requests can tell — so it closes the bracket from above like a miss
(the answer is the highest load *known* to meet every bound) and is named as undecided
in the answer. A probe whose
run failed (not stopped by a signal) misses: the server did not serve that load. A probe
the client limited is marked (``client_limited``): its latencies are partly the client's.

**The answer** is the highest load met, with the bracket ``[met, missed)`` it is known to
lie in (the uncertainty of the search) and each probe's statistics with their intervals
(the uncertainty of each verdict). ``sweep.json``'s ``search`` holds it.

**The time estimate** (``estimate``) adds each point's schedule: the plan's measured
requests over the offered rate (open loop) or the duration asked for, plus
``POINT_OVERHEAD_S`` for starting the embedded engine, probes and run directory; a
closed loop without a duration depends on the server's speed, which is said.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from diagnose.sla import Bound, check_bounds, probe_verdict
from runfmt.names import SWEEP_JSON
from runfmt.sweep import COMPLETE, SweepResult, write_sweep
from runfmt.sweep_search import (
    ALL_MET,
    DONE,
    INCONCLUSIVE,
    MEETS,
    MISSES,
    NARROWED,
    NONE_MET,
    STOPPED,
    ProbeSection,
    SearchSection,
)
from runtime import atomic
from runtime.atomic import WriteFailed
from session.bench_options import BenchOptions
from session.bench_runner import run_bench
from session.sweep import AXES, place_knee, point_name, point_of, rising_figure
from workloads.errors import InputError

#: A rate bracket narrower than this share of its low end ends the bisection.
RESOLUTION = 0.1
#: An undecided probe is rerun with at most this many times its requests.
MAX_GROWTH = 4
#: Seconds a point costs beyond its schedule (engine start, probes, drain), about: the
#: embedded engine starts in 1–3 s on a busy 2-core machine.
POINT_OVERHEAD_S = 3.0


@dataclass(frozen=True)
class Estimate:
    """How long points take: seconds per point (``None`` where the server's speed says)."""

    per_point_s: list[float | None]

    @property
    def known_s(self) -> float:
        return sum(s for s in self.per_point_s if s is not None)

    def sentence(self, what: str) -> str:
        """``what: N points, about T`` (what the server's speed decides said as such)."""
        unknown = sum(1 for s in self.per_point_s if s is None)
        n = len(self.per_point_s)
        if unknown == n:
            return (
                f"{what}: {n} points; each closed-loop point's length depends on the server's "
                "speed (give --duration to bound it)"
            )
        text = f"{what}: {n} points, about {_duration(self.known_s)}"
        if unknown:
            text += f" plus {unknown} closed-loop points whose length depends on the server"
        return text


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


def planned_shape(base: BenchOptions) -> tuple[int | None, float | None]:
    """The measured requests one point sends and their mean ``max_tokens``, from the
    workload's plan (built without a tokenizer); a dataset file's plan needs the
    server's tokenizer: ``--num-requests`` and ``None`` then."""
    asked = base.overrides.get("num_requests")
    from session.bench_plan import resolve_workload
    from workloads.build import build_plan

    try:
        spec, _ = resolve_workload(base.workload, dict(base.overrides), base.api)
        measured = build_plan(spec, None).measured
    except InputError:
        return (asked if isinstance(asked, int) else None), None
    outputs = sum(r.max_tokens for r in measured) / len(measured) if measured else None
    return len(measured), outputs


def planned_requests(base: BenchOptions) -> int | None:
    """The measured requests one point sends (``planned_shape``)."""
    return planned_shape(base)[0]


def estimate(base: BenchOptions, axis: str, values: list[float]) -> Estimate:
    """Seconds each point of ``values`` takes (module docstring)."""
    duration = base.overrides.get("duration")
    requests = planned_requests(base)
    per_point: list[float | None] = []
    for value in values:
        if isinstance(duration, int | float):
            per_point.append(float(duration) + POINT_OVERHEAD_S)
        elif axis == "rate" and math.isfinite(value) and requests is not None:
            per_point.append(max(requests - 1, 0) / value + POINT_OVERHEAD_S)
        else:
            per_point.append(None)
    return Estimate(per_point)


def search_steps(values: list[float], axis: str, resolution: float) -> int:
    """The most probes a search over ``values`` makes: every grid point, then the
    bisections of the widest bracket between two of them."""
    widest = max((b / a for a, b in itertools.pairwise(values)), default=1.0)
    if axis == "concurrency":
        span = max((b - a for a, b in itertools.pairwise(values)), default=1.0)
        return len(values) + max(0, math.ceil(math.log2(max(span, 1.0))))
    halvings = math.log(math.log(widest) / math.log(1 + resolution), 2) if widest > 1 else 0
    return len(values) + max(0, math.ceil(halvings))


def midpoint(low: float, high: float, axis: str) -> float:
    """The next probe between ``low`` (met) and ``high`` (missed)."""
    if axis == "concurrency":
        return float((int(low) + int(high)) // 2)
    middle = math.sqrt(low * high)
    digits = 2 - math.floor(math.log10(middle))  # three significant digits
    return round(middle, max(digits, 0))


def narrow_enough(low: float, high: float, axis: str, resolution: float) -> bool:
    if axis == "concurrency":
        return high - low <= 1
    return high <= low * (1 + resolution)


class _Search:
    def __init__(self, base: BenchOptions, axis: str, bounds: list[Bound], out: Path,
                 display: Any) -> None:  # fmt: skip
        self.base, self.axis, self.bounds, self.out, self.display = (
            base, axis, bounds, out, display,
        )  # fmt: skip
        self.sweep = SweepResult(axis=axis, figure=rising_figure(base.slo is not None))
        self.search = SearchSection(bounds=tuple(b.section() for b in bounds))
        self.first_requests = planned_requests(base)

    async def probe(self, value: float) -> str:
        """Run one probe at ``value`` (rerun once with more requests when undecided)."""
        verdict, needed = await self._run(value, None)
        if verdict != INCONCLUSIVE or needed is None or self.first_requests is None:
            return verdict
        cap = MAX_GROWTH * self.first_requests
        size = min(max(needed, self.first_requests + 1), cap)
        if size <= self.first_requests:
            return verdict
        verdict, _ = await self._run(value, size)
        return verdict

    async def _run(self, value: float, requests: int | None) -> tuple[str, int | None]:
        name = point_name(self.axis, value) + (f"-n{requests}" if requests else "")
        other = "concurrency" if self.axis == "rate" else "rate"
        overrides = {k: v for k, v in self.base.overrides.items() if k != other}
        overrides[self.axis] = int(value) if self.axis == "concurrency" else value
        if requests is not None:
            overrides["num_requests"] = requests
        options = replace(self.base, overrides=overrides, out=self.out / name)
        shown = self.display(name) if self.display is not None else None
        outcome = await run_bench(options, shown)
        if outcome.write_failure is not None:  # a full disk: the search stops at this probe
            kept = f"{len(self.search.probes)} probes before it in {self.out / SWEEP_JSON}"
            raise WriteFailed(None, outcome.write_failure, f"probe {name} stopped; {kept}")
        point = point_of(value, name, outcome)
        points = [p for p in self.sweep.points if p.value != value] + [point]
        self.sweep = replace(self.sweep, points=tuple(sorted(points, key=lambda p: p.value)))
        probe = ProbeSection(
            value=value,
            run_dir=name,
            status=outcome.status,
            requests=requests or self.first_requests,
            client_limited=bool(point.figure("client_limited")),
        )
        needed = None
        if outcome.cancelled:
            probe = replace(probe, verdict=STOPPED)
        elif outcome.status != COMPLETE:
            probe = replace(probe, verdict=MISSES, reason=f"the run {outcome.status}")
        else:
            checks = check_bounds(outcome.run_dir, self.bounds)
            verdict = probe_verdict(checks)
            probe = replace(probe, verdict=verdict, checks=tuple(c.section() for c in checks))
            wanted = [c.needed_requests for c in checks if c.needed_requests is not None]
            needed = max(wanted) if wanted and verdict == INCONCLUSIVE else None
        self.search = replace(self.search, probes=(*self.search.probes, probe))
        self.write()
        return probe.verdict, needed

    def write(self) -> None:
        """``sweep.json`` as the search stands (its answer once ``self.search`` holds it)."""
        self.sweep = replace(place_knee(self.sweep), search=self.search)
        write_sweep(self.out, self.sweep)


async def find_highest(
    base: BenchOptions,
    axis: str,
    values: list[float],
    bounds: list[Bound],
    out: Path,
    *,
    resolution: float = RESOLUTION,
    display: Any = None,
) -> SweepResult:
    """The SLA search (module docstring) over ``values`` into the folder ``out``."""
    if axis not in AXES:
        raise InputError("--axis", f"unknown sweep axis {axis!r}", "rate or concurrency")
    if (out / SWEEP_JSON).exists():
        raise InputError("--out", f"{out} already holds a sweep", "pick a new folder")
    atomic.make_folder(out)
    started = time.monotonic()
    runner = _Search(base, axis, bounds, out, display)
    met: float | None = None
    above: float | None = None  # the lowest load missed or undecided
    undecided: float | None = None
    ended = NARROWED
    for value in values:
        verdict = await runner.probe(value)
        if verdict == MEETS:
            met = value
            continue
        if verdict == STOPPED:
            ended = STOPPED
        above = value
        undecided = value if verdict == INCONCLUSIVE else None
        break
    else:
        ended = ALL_MET
    while ended == NARROWED and met is not None and above is not None:
        if narrow_enough(met, above, axis, resolution):
            break
        middle = midpoint(met, above, axis)
        verdict = await runner.probe(middle)
        if verdict == MEETS:
            met = middle
        elif verdict == STOPPED:
            ended = STOPPED
        else:
            above = middle
            undecided = middle if verdict == INCONCLUSIVE else undecided
    if met is None and ended == NARROWED:
        ended = NONE_MET
    runner.search = replace(
        runner.search,
        state=DONE if ended != STOPPED else STOPPED,
        answer=met,
        bracket=(met, above),
        undecided_at=undecided,
        ended=ended,
        resolution=resolution,
        elapsed_s=round(time.monotonic() - started, 1),
    )
    runner.write()
    return runner.sweep
