"""``session.sweep``'s curve (points, saturation, knee) and ``session.sweep_compare``
(two sweep folders compared load by load), from points written by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from prefillscope.compare_view import knee_sentence
from runfmt.compareresult import SweepKnees
from runfmt.names import SWEEP_JSON
from runfmt.rundir import RunDir
from runfmt.summary import Summary
from runfmt.sweep import SweepPoint, SweepResult, read_sweep, sweep_point
from session.sweep import figures, knee, parse_values, place_knee, point_name, saturation
from session.sweep_compare import compare_sweeps, sweep_points
from workloads.errors import InputError


def _points(*achieved: float) -> list[SweepPoint]:
    return [sweep_point(float(i + 1), f"rate-{i + 1}", "complete", {"achieved_rps": a})
            for i, a in enumerate(achieved)]  # fmt: skip


def test_loads_are_sorted_distinct_positive_and_inf_only_for_a_rate():
    assert parse_values("8,1,2,2,inf", "rate") == [1.0, 2.0, 8.0, math.inf]
    assert parse_values("4,16", "concurrency") == [4.0, 16.0]
    for text, axis in (("1", "rate"), ("1,x", "rate"), ("0,1", "rate"),
                       ("1.5,2", "concurrency"), ("1,inf", "concurrency")):  # fmt: skip
        with pytest.raises(InputError) as err:
            parse_values(text, axis)
        assert err.value.field == f"--{axis}"
    assert point_name("rate", 0.5) == "rate-0.5" and point_name("concurrency", 64.0) == (
        "concurrency-64"
    )


def test_saturation_is_the_first_point_gaining_less_than_the_minimum_over_the_best_before():
    # 1 -> 2 -> 3.9 rise; 4.0 is under 3.9 x 1.05 = 4.095: saturated at index 3
    points = _points(1.0, 2.0, 3.9, 4.0, 6.0)
    assert saturation(points, "achieved_rps") == 3
    assert knee(points, "achieved_rps", 3) == 2
    assert saturation(points, "achieved_rps", min_gain=0.0) is None
    assert knee(points, "achieved_rps", None) == 4


def test_a_point_without_the_figure_counts_as_zero_and_the_first_of_equals_is_the_knee():
    points = _points(2.0, 2.0)
    points.append(sweep_point(3.0, "rate-3", "failed", {}))
    assert saturation(points, "achieved_rps") == 1
    assert knee(points, "achieved_rps", None) == 0


def test_figures_are_read_from_a_summary_and_absent_ones_are_none():
    summary = {"throughput": {"requests_per_s": 3, "output_tokens_per_s": 120.5},
               "ttft_s": {"p50": 0.1, "p99": "n/a"}, "requests": {"completed": 30}}  # fmt: skip
    got = figures(Summary.from_json(summary))
    assert (got["achieved_rps"], got["output_tokens_per_s"]) == (3.0, 120.5)
    assert got["ttft_p50_s"] == 0.1
    assert got["ttft_p99_s"] is None and got["goodput_rps"] is None and got["completed"] == 30


def _sweep(folder, axis: str, values: dict[float, str], knee_at: float | None) -> None:
    points = [{"value": v, "run_dir": point_name(axis, v), "status": s} for v, s in values.items()]
    RunDir(folder, create=True).write_json(SWEEP_JSON, {"axis": axis, "knee": knee_at,
                                                        "points": points})  # fmt: skip


def test_two_sweeps_are_compared_at_every_load_both_completed(tmp_path):
    _sweep(tmp_path / "a", "rate", {1: "complete", 2: "complete", 4: "complete"}, 2)
    _sweep(tmp_path / "b", "rate", {2: "complete", 4: "failed", 8: "complete"}, 8)
    assert read_sweep(tmp_path / "nothing") is None
    assert set(sweep_points(tmp_path / "a")[1]) == {1.0, 2.0, 4.0}
    compared = compare_sweeps(tmp_path / "a", tmp_path / "b", lambda a, b: (a.name, b.name))
    assert compared.points == [("rate-2", ("rate-2", "rate-2"))]
    assert knee_sentence(compared.knees()) == "knee: base 2 req/s, new 8 req/s"
    assert knee_sentence(SweepKnees("concurrency", None, 4)) == ("knee: base none, new 4 users")


def test_a_sweep_against_a_run_or_another_axis_or_no_shared_load_is_refused(tmp_path):
    _sweep(tmp_path / "a", "rate", {1: "complete"}, 1)
    _sweep(tmp_path / "c", "concurrency", {1: "complete"}, 1)
    _sweep(tmp_path / "d", "rate", {3: "complete"}, 3)
    (tmp_path / "run").mkdir()
    assert compare_sweeps(tmp_path / "run", tmp_path / "run", lambda a, b: None) is None
    for other, words in (("run", "is not a sweep folder"), ("c", "the other over concurrency"),
                         ("d", "share no completed load")):  # fmt: skip
        with pytest.raises(InputError) as err:
            compare_sweeps(tmp_path / "a", tmp_path / other, lambda a, b: None)
        assert err.value.field == "NEW_RUN" and words in err.value.problem


def test_a_rate_point_serving_under_the_share_offered_is_saturated_though_it_gained():
    """Offered 80, served 36 req/s: throughput rose over the point before, but the server
    no longer keeps up (issue 38's sweep called it the knee, "still rising")."""
    points = [
        sweep_point(p.value, p.run_dir, p.status, p.figures | {"offered_rps": offered})
        for p, offered in zip(_points(10.0, 19.5, 36.0), (10.2, 20.1, 80.0), strict=True)
    ]
    assert saturation(points, "achieved_rps") == 2
    sweep = place_knee(SweepResult(axis="rate", points=tuple(points), figure="achieved_rps"))
    assert (sweep.knee, sweep.saturated_at) == (2.0, 3.0)
    assert sweep.saturation_cause == "served_below_offered"


def test_an_interrupted_point_is_never_the_knee_nor_the_saturation_point():
    points = _points(1.0, 2.0, 9.0)
    points[2] = replace(points[2], status="stopped")  # SIGTERM during the third point
    sweep = place_knee(SweepResult(axis="rate", points=tuple(points), figure="achieved_rps"))
    assert sweep.knee == 2.0 and sweep.saturated_at is None and sweep.saturation_cause is None
    points[2] = sweep_point(3.0, "rate-3", "stopped", {"achieved_rps": 0.1})  # its collapse
    sweep = place_knee(replace(sweep, points=tuple(points)))  # is no saturation
    assert sweep.knee == 2.0 and sweep.saturated_at is None


def test_the_served_rate_follows_the_arrivals_whatever_the_latency():
    import numpy as np

    from session.sweep import served_rate

    arrivals = np.arange(40) / 10.0  # 10 req/s
    assert served_rate(arrivals + 0.8) == pytest.approx(10.0)  # a long latency, kept up
    queued = np.arange(40) / 4.0 + 0.2  # a server completing 4/s whatever it is offered
    assert served_rate(queued) == pytest.approx(4.0)
    assert served_rate(np.array([1.0, np.nan])) is None and served_rate(None) is None
