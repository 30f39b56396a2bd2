"""The report's own plotting: ticks, escaping, thinning that keeps what a reader must see."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from prefillscope.report.figures import cdf_points, sample_keeping_extremes, thin_samples
from prefillscope.report.markup import Markup, el, void
from prefillscope.report.scale import Axis, Scale, linear_ticks, log_ticks
from prefillscope.report.svg import MAX_POINTS, Chart
from runfmt.units import fmt_seconds

SVG_NS = "{http://www.w3.org/2000/svg}"


def _series(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [g for g in root.iter(f"{SVG_NS}g") if g.get("class") == "series"]


def test_linear_ticks_are_nice_and_cover_the_data() -> None:
    assert linear_ticks(0, 97) == [0, 20, 40, 60, 80, 100]
    assert linear_ticks(0.013, 0.048) == [0.01, 0.02, 0.03, 0.04, 0.05]
    assert linear_ticks(-3, 7) == [-4, -2, 0, 2, 4, 6, 8]
    assert linear_ticks(0, 10.1) == [0, 2, 4, 6, 8, 10, 12]  # not 0..15 in steps of 5
    assert linear_ticks(0, 3.6) == [0, 1, 2, 3, 4]  # on a tie, fewer ticks


def test_log_ticks_use_decades_and_fill_in_short_spans() -> None:
    assert log_ticks(1e-4, 2.0) == [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0]
    short = log_ticks(0.012, 0.43)
    assert short[0] == 0.01 and short[-1] == 0.5
    assert {0.02, 0.05, 0.1, 0.2} <= set(short)


def test_log_scale_ignores_non_positive_values_and_maps_monotonically() -> None:
    scale = Scale.fit(Axis("x", log=True), np.array([0.0, -1.0, 0.02, 0.4]))
    assert scale.lo <= 0.02 and scale.hi >= 0.4
    scale.p0, scale.p1 = 0.0, 100.0
    px = scale.to_px(np.array([0.0, 0.02, 0.1, 0.4]))
    assert np.isnan(px[0]) and px[1] < px[2] < px[3]


def test_duration_labels() -> None:
    assert [fmt_seconds(v) for v in (5e-5, 0.02, 1.5, 300)] == ["50 µs", "20 ms", "1.5 s", "5 min"]


def test_markup_escapes_text_and_attributes_but_not_our_fragments() -> None:
    hostile = '<script>alert(1)</script>" onload="x'
    out = el("td", hostile, title=hostile, class_="num")
    assert "<script" not in out and 'onload="x' not in out
    assert "&lt;script&gt;" in out and "&quot; onload=&quot;x" in out
    assert el("p", Markup("<b>ok</b>")) == "<p><b>ok</b></p>"
    assert void("rect", stroke_width=1.5, x=2.0) == '<rect stroke-width="1.5" x="2"/>'


def test_cdf_points_keep_both_ends_and_the_tail() -> None:
    values = np.random.default_rng(0).lognormal(np.log(0.02), 0.3, 1_000_000)
    values[123] = 9.0  # one stall
    x, y = cdf_points(values, 1500)
    assert x.size <= 1502
    assert x[0] == values.min() and x[-1] == 9.0 and y[-1] == 1.0
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0)
    # The tail is resolved: there is a point between p99.9 and the maximum.
    assert ((y > 0.999) & (y < 1.0)).sum() >= 10


def test_sampling_keeps_the_top_percent() -> None:
    values = np.random.default_rng(1).random(200_000)
    idx = sample_keeping_extremes(values, limit=10_000)
    assert idx.size <= 10_000
    top = np.argsort(values)[-100:]
    assert np.isin(top, idx).all()


def test_pool_thinning_keeps_each_layers_extremes() -> None:
    active = np.full(10_000, 5.0)
    active[4321] = 99.0
    free = np.full(10_000, 50.0)
    free[777] = 0.0
    idx = thin_samples([active, free], limit=500)
    assert idx.size <= 510 and {4321, 777} <= set(idx.tolist())


def test_chart_counts_series_escapes_names_and_is_valid_xml() -> None:
    chart = Chart("c", "t <1>", Axis("x"), Axis("y", log=True))
    chart.line("<script>a</script>", [1, 2, 3], [0.1, 0.2, 0.3])
    chart.points("dots", [1, 2], [0.1, 0.3])
    chart.vlines("marks", [1.5, 2.5])
    svg = chart.render()
    series = _series(svg)
    assert [s.get("data-kind") for s in series] == ["line", "points", "vlines"]
    assert series[0].get("data-series") == "<script>a</script>"  # parsed back = escaped in text
    assert "<script" not in svg


def test_dense_points_are_capped_but_the_outlier_survives() -> None:
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 100, 1_000_000)
    y = rng.lognormal(np.log(0.02), 0.2, x.size)
    y[555] = 5.0
    chart = Chart("d", "dense", Axis("t"), Axis("itl", log=True))
    chart.points("gaps", x, y)
    svg = chart.render()
    dots = re.findall(r"M([\d.]+),([\d.]+)a", svg)
    assert 100 < len(dots) <= MAX_POINTS
    top_px = min(float(py) for _, py in dots)
    scale = Scale.fit(Axis("itl", log=True), y)
    # The stall is the highest dot drawn (within a dot's radius of its true position).
    outlier_unit = (np.log10(5.0) - np.log10(scale.lo)) / (np.log10(scale.hi) - np.log10(scale.lo))
    root = ET.fromstring(svg)
    frame = next(r for r in root.iter(f"{SVG_NS}rect") if r.get("class") == "frame")
    top, height = float(frame.get("y")), float(frame.get("height"))
    assert abs(top_px - (top + height * (1 - outlier_unit))) < 3


def test_long_lines_are_thinned_per_pixel_column_keeping_spikes() -> None:
    x = np.arange(200_000, dtype=float)
    y = np.full(x.size, 0.02)
    y[150_000] = 0.5
    chart = Chart("l", "line", Axis("t"), Axis("y"))
    chart.line("p99", x, y)
    svg = chart.render()
    d = _series(svg)[0].find(f"{SVG_NS}path").get("d")
    ys = [float(p.split(",")[1]) for p in d[1:].split("L")]
    assert len(ys) < 5_000
    assert min(ys) < max(ys) - 100  # the spike is still drawn at full height


def test_stacked_areas_hatch_unknown_layers() -> None:
    chart = Chart("p", "pool", Axis("t"), Axis("blocks", include_zero=True))
    t = np.arange(10.0)
    chart.stacked(
        t,
        [("active", np.full(10, 3.0), "#00f", False), ("unknown", np.full(10, 7.0), "#888", True)],
    )
    svg = chart.render()
    series = _series(svg)
    assert [s.get("data-series") for s in series] == ["active", "unknown"]
    fills = [s.find(f"{SVG_NS}path").get("fill") for s in series]
    assert fills == ["#00f", "url(#p-hatch)"]
    assert 'id="p-hatch"' in svg


def test_empty_chart_says_so() -> None:
    chart = Chart("e", "nothing", Axis("t"), Axis("y"), empty_message="no data here")
    svg = chart.render()
    assert "no data here" in svg and _series(svg) == []


def test_lines_break_where_values_are_missing_and_steps_hold() -> None:
    chart = Chart("b", "gaps", Axis("t"), Axis("y"))
    chart.line("p99", [0, 1, 2, 3, 4, 5], [1, 2, np.nan, np.nan, 3, 4])
    chart.line("held", [0, 1, 2], [1, 2, 3], step=True)
    svg = chart.render()
    broken, held = (g.find(f"{SVG_NS}path").get("d") for g in _series(svg))
    assert broken.count("M") == 2 and broken.count("L") == 2  # two segments, no bridge
    points = [tuple(map(float, p.split(","))) for p in held[1:].split("L")]
    assert len(points) == 5  # (0,1) (1,1) (1,2) (2,2) (2,3): horizontal then vertical
    assert points[0][1] == points[1][1] and points[1][0] == points[2][0]


@pytest.mark.parametrize(
    ("lo", "hi", "labels"),
    [
        (1e-5, 1.0, ["10 µs", "100 µs", "1 ms", "10 ms", "100 ms", "1 s"]),
        (1e-5, 1e-3, ["10 µs", "20 µs", "50 µs", "100 µs", "200 µs", "500 µs", "1 ms"]),
        (0.05, 30.0, ["10 ms", "100 ms", "1 s", "10 s", "100 s"]),
    ],
)
def test_log_time_ticks_are_said_in_their_own_unit_at_every_scale(lo, hi, labels) -> None:
    """Issue 41: a 10 µs–1 s axis labelled its two lowest ticks "0 s"."""
    scale = Scale.fit(Axis("latency", log=True, fmt=fmt_seconds), np.array([lo, hi]))
    assert [scale.label(t) for t in scale.ticks] == labels
