"""A sweep: one bench run per request rate (or per closed-loop concurrency), into one
folder, with a saturation search and the knee of the latency–throughput curve.

Points are run in increasing order of load. Each is an ordinary run directory
(``<out>/rate-4/``, ``<out>/concurrency-64/``) made by ``run_bench`` with everything else
as given; ``sweep.json`` beside them holds the curve (``runfmt.sweep``, the document and
its version): per point the offered load, the achieved request and output-token rates,
goodput (with an SLO), and p50/p99 TTFT and ITL.

The figure that should rise with the load is goodput (requests/s meeting the SLO) when
an SLO is given, else the achieved request rate. Saturation: a point whose figure is
less than ``1 + min_gain`` times the best before it gained nothing from more load; on the
rate axis, also a point whose served rate (``served_rps``: completions per second from the
first completion to the last, which a server keeping up matches to the arrivals whatever
each request's latency) fell below ``FOLLOW_SHARE`` of the rate its schedule offered
(``offered_rps``: the plan's intended sends, run.json's ``offered_rate_per_s``): the
server no longer keeps up, whatever the gain over the point before. The search stops
there (unless told to run every point). The knee is the point with the best figure
before saturation — the most the server delivers before more load buys only latency.
Only completed points count: a point stopped by a signal or failed is in the table,
never the knee nor the saturation point. A point the client limited (``summary.json``'s
``client.limited``) is marked: its latencies are partly the client's.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from runfmt.metrics import OUTPUT_TOKENS_PER_S, json_name, stat_of, sweep_figures
from runfmt.names import SWEEP_JSON
from runfmt.run import open_run
from runfmt.summary import Summary
from runfmt.summary_sections import GoodputSection
from runfmt.sweep import (
    ACHIEVED_RPS,
    COMPLETE,
    GOODPUT_RPS,
    GOODPUT_SHARE,
    OFFERED_RPS,
    SERVED_RPS,
    SweepPoint,
    SweepResult,
    sweep_point,
    write_sweep,
)
from runtime import atomic
from runtime.atomic import WriteFailed
from session.bench_options import BenchOptions
from session.bench_runner import run_bench
from session.exit_status import BenchOutcome
from session.live_stats import Display
from workloads.errors import InputError

AXES = ("rate", "concurrency")
#: A point must beat the best before it by this share to count as still rising.
MIN_GAIN = 0.05
#: A rate point serving less than this share of the rate it offered is saturated: a
#: server keeping up serves what it is offered (less one request lifetime at the end).
FOLLOW_SHARE = 0.8


def parse_values(text: str, axis: str) -> list[float]:
    """``1,2,4,8`` → sorted distinct positive loads (``inf`` allowed for a rate)."""
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise InputError(f"--{axis}", f"{part!r} is not a number", "e.g. 1,2,4,8") from None
        finite_or_inf = math.isfinite(value) or (axis == "rate" and value == math.inf)
        if not finite_or_inf or value <= 0 or (axis == "concurrency" and value != int(value)):
            what = "positive whole numbers" if axis == "concurrency" else "positive numbers"
            raise InputError(f"--{axis}", f"{part!r}: sweep points are {what}", "e.g. 1,2,4,8")
        values.append(value)
    if len(set(values)) < 2:
        raise InputError(f"--{axis}", "a sweep needs two or more distinct points", "e.g. 1,2,4,8")
    return sorted(set(values))


def point_name(axis: str, value: float) -> str:
    return f"{axis}-{value:g}"


def figures(sections: Summary) -> dict[str, float | None]:
    """The curve's figures of one run's summary (a figure that is no number is ``None``)."""
    throughput, requests = sections.throughput, sections.requests
    goodput = sections.goodput or GoodputSection()
    stat = sections.statistic
    values = {
        ACHIEVED_RPS: throughput.requests_per_s,
        OUTPUT_TOKENS_PER_S.key: throughput.output_tokens_per_s,
        GOODPUT_RPS: goodput.requests_per_s,
        GOODPUT_SHARE: goodput.share,
        **{
            json_name(name): stat(metric.key, statistic)
            for name in sweep_figures()
            for metric, statistic in (stat_of(name),)
        },
        "completed": requests.completed,
        "failed": requests.failed,
        "client_limited": sections.client.limited,
    }
    return {k: float(v) if isinstance(v, int | float) else None for k, v in values.items()}


def rising_figure(slo_given: bool) -> str:
    return GOODPUT_RPS if slo_given else ACHIEVED_RPS


def not_following(point: SweepPoint) -> bool:
    """Whether a rate point served less than ``FOLLOW_SHARE`` of the rate it offered."""
    served = point.figure(SERVED_RPS)
    served = point.figure(ACHIEVED_RPS) if served is None else served
    offered = point.figure(OFFERED_RPS)
    return served is not None and offered is not None and served < FOLLOW_SHARE * offered


def saturation(points: list[SweepPoint], figure: str, min_gain: float = MIN_GAIN) -> int | None:
    """Index of the first point that gained less than ``min_gain`` over the best before,
    or that served less than ``FOLLOW_SHARE`` of what it was offered."""
    best: float | None = None
    for i, point in enumerate(points):
        value = point.figures.get(figure) or 0.0
        if not_following(point) or (best is not None and value < best * (1 + min_gain)):
            return i
        best = value if best is None else max(best, value)
    return None


def knee(points: list[SweepPoint], figure: str, saturated: int | None) -> int | None:
    """Index of the best point before saturation (the first of equals)."""
    upto = points if saturated is None else points[:saturated]
    if not upto:
        return None
    values = [p.figures.get(figure) or 0.0 for p in upto]
    return values.index(max(values))


async def run_sweep(
    base: BenchOptions,
    axis: str,
    values: list[float],
    out: Path,
    *,
    search: bool = True,
    min_gain: float = MIN_GAIN,
    display: Any = None,
) -> SweepResult:
    """Run ``base`` at each load of ``values`` (increasing) into ``out``; stop at
    saturation when ``search``. ``display(name) -> Display | None`` shows each run."""
    if axis not in AXES:
        raise InputError("--axis", f"unknown sweep axis {axis!r}", "rate or concurrency")
    if (out / SWEEP_JSON).exists():
        raise InputError("--out", f"{out} already holds a sweep", "pick a new folder")
    atomic.make_folder(out)
    figure = rising_figure(base.slo is not None)
    sweep = SweepResult(axis=axis, figure=figure)
    other = "concurrency" if axis == "rate" else "rate"
    for value in values:
        name = point_name(axis, value)
        overrides = {k: v for k, v in base.overrides.items() if k != other}
        overrides[axis] = int(value) if axis == "concurrency" else value
        options = replace(base, overrides=overrides, out=out / name)
        shown: Display | None = display(name) if display is not None else None
        outcome = await run_bench(options, shown)
        if outcome.write_failure is not None:  # a full disk: no figures to place on the curve
            raise _stopped_by_write(out, sweep, min_gain, outcome)
        sweep = _write(
            out, replace(sweep, points=(*sweep.points, point_of(value, name, outcome))), min_gain
        )
        if outcome.status != "complete":
            sweep = replace(sweep, stopped_early=True)
            break
        if search and saturation(list(sweep.points), figure, min_gain) is not None:
            sweep = replace(sweep, stopped_early=value != values[-1])
            break
    return _write(out, sweep, min_gain)


def point_of(value: float, name: str, outcome: Any) -> SweepPoint:
    """A point of the curve from a finished bench run (``run_bench``'s outcome)."""
    found = figures(outcome.summary)
    try:
        run = open_run(outcome.run_dir)
        offered = run.info.plan.offered_rate_per_s if run.info is not None else None
        ends = run.tables.completed["end_s"].to_numpy(dtype=float)
    except InputError:  # run.json unwritten: the point has no offered rate to follow
        offered, ends = None, None
    found[OFFERED_RPS] = float(offered) if isinstance(offered, int | float) else None
    found[SERVED_RPS] = served_rate(ends)
    return sweep_point(value, name, outcome.status, found)


def served_rate(ends: Any) -> float | None:
    """Completions per second between the first completion and the last: a server that
    keeps up completes requests as fast as they arrive, whatever each one's latency (the
    achieved rate over the whole window counts one request lifetime on top)."""
    if ends is None:
        return None
    ends = ends[ends == ends]  # NaN: not ended
    if len(ends) < 3 or not ends.max() > ends.min():
        return None
    return float((len(ends) - 1) / (ends.max() - ends.min()))


def place_knee(sweep: SweepResult, min_gain: float = MIN_GAIN) -> SweepResult:
    """``sweep`` with its saturation point and knee set from its completed points only."""
    done = [p for p in sweep.points if p.status == COMPLETE]
    saturated = saturation(done, sweep.figure, min_gain)
    best = knee(done, sweep.figure, saturated)
    return replace(
        sweep,
        saturated_at=done[saturated].value if saturated is not None else None,
        knee=done[best].value if best is not None else None,
        saturation_cause=(
            None
            if saturated is None
            else "served_below_offered"
            if not_following(done[saturated])
            else "no_gain"
        ),
    )


def _stopped_by_write(
    out: Path, sweep: SweepResult, min_gain: float, outcome: BenchOutcome
) -> WriteFailed:
    """The sweep's failure when a point's run could not be written: that point is left
    off the curve (its folder holds what it kept), ``sweep.json`` keeps the points before."""
    sweep = replace(sweep, stopped_early=True)
    try:
        _write(out, sweep, min_gain)
        kept = f"{len(sweep.points)} points before it kept in {out / SWEEP_JSON}"
    except WriteFailed:
        kept = f"{out / SWEEP_JSON} as last written"
    where = f"point {outcome.run_dir.name} stopped ({outcome.run_dir})"
    return WriteFailed(None, outcome.write_failure or "", f"{where}; {kept}")


def _write(out: Path, sweep: SweepResult, min_gain: float) -> SweepResult:
    """Write ``sweep`` with its knee placed; returns it so."""
    placed = place_knee(sweep, min_gain)
    write_sweep(out, placed)
    return placed
