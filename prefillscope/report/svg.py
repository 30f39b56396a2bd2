"""Charts as inline SVG: lines, steps, points, stacked areas, vertical markers, legends.

The HTML report must work offline and must not grow with the run: a run of 10^5
requests has ~10^7 token gaps. Every series is therefore thinned in *pixel space* at
render time — points that fall into the same few-pixel cell are one visible dot, so one
(the highest) is kept; a line keeps a point only when it moves at least half a pixel, or
it is the extreme of its pixel column. What a reader could see survives; bytes don't.
Each legend entry is one ``<g class="series">`` so tests (and readers of the markup) can
count what a plot shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from prefillscope.report.markup import Markup, el, fmt_num, join, void
from prefillscope.report.scale import Axis, Scale

#: Okabe–Ito: distinguishable with the common colour-vision deficiencies, and in print.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
UNKNOWN_FILL = "url(#{id}-hatch)"

FONT_PX = 11
CHAR_PX = 6.4  # average advance of an 11 px sans-serif glyph, for laying out legends
POINT_CELL_PX = 2.0
MAX_POINTS = 4000  # dots per chart, shared by its point series
POINT_RADIUS_PX = 2.2
CLIP_PAD_PX = 3.0  # dots on the frame are drawn whole, not halved


@dataclass
class _Series:
    name: str
    kind: str  # "line" | "step" | "points" | "vlines" | "area"
    x: np.ndarray
    y: np.ndarray
    color: str
    dash: str | None = None
    lower: np.ndarray | None = None  # stacked areas: the band is [lower, y]
    hatched: bool = False


@dataclass
class Chart:
    """One plot. Add series, then ``render()`` to an ``<svg>`` fragment."""

    chart_id: str
    title: str
    x: Axis
    y: Axis
    width: int = 880
    height: int = 300
    empty_message: str = "no data"
    series: list[_Series] = field(default_factory=list)

    # -- adding data ---------------------------------------------------------------------
    def _color(self, color: str | None) -> str:
        return color or PALETTE[len(self.series) % len(PALETTE)]

    def line(
        self, name: str, x, y, *, color: str | None = None, dash: str | None = None, step=False
    ) -> None:
        """A polyline through (x, y) in x order, broken where y is missing (NaN);
        ``step`` holds each value until the next x."""
        xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        order = np.argsort(xs, kind="stable")
        xs, ys = xs[order], ys[order]
        self.series.append(
            _Series(name, "step" if step else "line", xs, ys, self._color(color), dash)
        )

    def points(self, name: str, x, y, *, color: str | None = None) -> None:
        """A scatter of (x, y)."""
        xs, ys = _finite_xy(x, y)
        self.series.append(_Series(name, "points", xs, ys, self._color(color)))

    def vlines(self, name: str, x, *, color: str | None = None, dash: str | None = None) -> None:
        """Vertical markers across the plot at each x (events such as arrivals, quantiles)."""
        xs = np.asarray(x, dtype=float)
        xs = xs[np.isfinite(xs)]
        self.series.append(_Series(name, "vlines", xs, np.array([]), self._color(color), dash))

    def stacked(self, x, layers: list[tuple[str, np.ndarray, str, bool]]) -> None:
        """Stacked step areas over a shared x: ``(name, values, color, hatched)`` bottom-up.

        Each sample holds until the next one, and the last for one typical interval. A
        hatched layer is drawn with a diagonal pattern: the report uses it for a bucket
        whose size is known only as a remainder (``unknown``), so it is never mistaken
        for a measured value or for zero.
        """
        xs = np.asarray(x, dtype=float)
        order = np.argsort(xs, kind="stable")
        xs = xs[order]
        hold = [xs[-1] + float(np.median(np.diff(xs)))] if xs.size > 1 else []
        xs = np.r_[xs, hold]
        base = np.zeros(xs.size)
        for name, values, color, hatched in layers:
            v = np.nan_to_num(np.asarray(values, dtype=float)[order])
            top = base + np.r_[v, v[-1:] if hold else []]
            self.series.append(_Series(name, "area", xs, top, color, lower=base, hatched=hatched))
            base = top

    # -- rendering -----------------------------------------------------------------------
    def render(self) -> Markup:
        legend_rows = self._legend_layout()
        top = 30 + 18 * len(legend_rows)
        left, right, bottom = 70, 18, 46
        xs_all = np.concatenate([s.x for s in self.series] or [np.array([])])
        ys_all = np.concatenate(
            [s.y for s in self.series if s.kind != "vlines"]
            + [s.lower for s in self.series if s.lower is not None]
            or [np.array([])]
        )
        xscale = Scale.fit(self.x, xs_all)
        yscale = Scale.fit(self.y, ys_all)
        xscale.p0, xscale.p1 = left, self.width - right
        yscale.p0, yscale.p1 = self.height - bottom, top
        has_data = any(s.x.size for s in self.series)
        body = [
            self._defs(),
            el("text", self.title, x=left, y=18, class_="chart-title"),
            self._legend(legend_rows, left, 36),
            self._axes(xscale, yscale),
        ]
        clip = f"{self.chart_id}-clip"
        body.append(
            el(
                "clipPath",
                void(
                    "rect",
                    x=left - CLIP_PAD_PX,
                    y=top - CLIP_PAD_PX,
                    width=xscale.p1 - left + 2 * CLIP_PAD_PX,
                    height=yscale.p0 - top + 2 * CLIP_PAD_PX,
                ),
                id=clip,
            )
        )
        body.append(
            el(
                "g",
                [self._series_svg(s, xscale, yscale) for s in self.series],
                clip_path=f"url(#{clip})",
            )
        )
        if not has_data:
            body.append(
                el(
                    "text",
                    self.empty_message,
                    x=(left + xscale.p1) / 2,
                    y=(top + yscale.p0) / 2,
                    text_anchor="middle",
                    class_="chart-empty",
                )
            )
        return el(
            "svg",
            body,
            xmlns="http://www.w3.org/2000/svg",
            viewBox=f"0 0 {self.width} {self.height}",
            width=self.width,
            height=self.height,
            role="img",
            aria_label=self.title,
            class_="chart",
            id=self.chart_id,
            font_size=FONT_PX,
        )

    def _defs(self) -> Markup:
        hatch = el(
            "pattern",
            void("rect", width=6, height=6, fill="#f2f2f2"),
            void("path", d="M0,6 L6,0", stroke="#888", stroke_width=1),
            id=f"{self.chart_id}-hatch",
            patternUnits="userSpaceOnUse",
            width=6,
            height=6,
        )
        return el("defs", hatch)

    def _fill(self, s: _Series) -> str:
        return UNKNOWN_FILL.format(id=self.chart_id) if s.hatched else s.color

    def _legend_layout(self) -> list[list[tuple[_Series, float]]]:
        """Entries placed left to right, wrapping onto new rows inside the chart width."""
        rows: list[list[tuple[_Series, float]]] = [[]]
        cursor, limit = 0.0, self.width - 90
        for s in self.series:
            width = 22 + CHAR_PX * len(s.name) + 16
            if rows[-1] and cursor + width > limit:
                rows.append([])
                cursor = 0.0
            rows[-1].append((s, cursor))
            cursor += width
        return [row for row in rows if row]

    def _legend(self, rows: list[list[tuple[_Series, float]]], left: float, top: float) -> Markup:
        items = []
        for r, row in enumerate(rows):
            y = top + 18 * r
            for s, offset in row:
                x = left + offset
                items.append(_swatch(s, self._fill(s), x, y))
                items.append(el("text", s.name, x=x + 22, y=y + 4))
        return el("g", items, class_="legend")

    def _axes(self, xs: Scale, ys: Scale) -> Markup:
        parts = []
        for t in ys.ticks:
            py = float(ys.to_px(t))
            parts.append(void("line", x1=xs.p0, x2=xs.p1, y1=py, y2=py, class_="grid"))
            parts.append(el("text", ys.label(t), x=xs.p0 - 6, y=py + 4, text_anchor="end"))
        for t in xs.ticks:
            px = float(xs.to_px(t))
            parts.append(void("line", x1=px, x2=px, y1=ys.p0, y2=ys.p1, class_="grid"))
            parts.append(el("text", xs.label(t), x=px, y=ys.p0 + 16, text_anchor="middle"))
        parts.append(
            void(
                "rect", x=xs.p0, y=ys.p1, width=xs.p1 - xs.p0, height=ys.p0 - ys.p1, class_="frame"
            )
        )
        parts.append(
            el(
                "text",
                _axis_title(self.x),
                x=(xs.p0 + xs.p1) / 2,
                y=self.height - 8,
                text_anchor="middle",
                class_="axis-label",
            )
        )
        cy = (ys.p0 + ys.p1) / 2
        parts.append(
            el(
                "text",
                _axis_title(self.y),
                x=14,
                y=cy,
                text_anchor="middle",
                transform=f"rotate(-90 14 {fmt_num(cy)})",
                class_="axis-label",
            )
        )
        return el("g", parts, class_="axes")

    def _series_svg(self, s: _Series, xs: Scale, ys: Scale) -> Markup:
        px, py = xs.to_px(s.x), ys.to_px(s.y) if s.y.size else np.array([])
        if s.kind == "points":
            clouds = sum(1 for other in self.series if other.kind == "points")
            shapes = _points_path(*_thin_points(px, py, MAX_POINTS // clouds), s.color)
        elif s.kind == "vlines":
            cols = np.unique(np.round(px[np.isfinite(px)], 1))
            d = "".join(f"M{fmt_num(c)},{fmt_num(ys.p0)}V{fmt_num(ys.p1)}" for c in cols)
            shapes = void(
                "path",
                d=d,
                stroke=s.color,
                stroke_width=1.2 if s.dash else 1,
                stroke_opacity=0.9 if s.dash else 0.55,
                stroke_dasharray=s.dash,
                fill="none",
            )
        elif s.kind == "area":
            shapes = _area_path(px, py, ys.to_px(s.lower), self._fill(s), s.color)
        else:
            shapes = void(
                "path",
                d=_broken_polyline(px, py, step=s.kind == "step"),
                stroke=s.color,
                stroke_width=1.6,
                fill="none",
                stroke_dasharray=s.dash,
                stroke_linejoin="round",
            )
        return el("g", shapes, class_="series", data_series=s.name, data_kind=s.kind)


# -- helpers: data hygiene ---------------------------------------------------------------
def _broken_polyline(px: np.ndarray, py: np.ndarray, *, step: bool) -> str:
    """Path data for a line, one thinned segment per run of points with a value."""
    ok = np.isfinite(px) & np.isfinite(py)
    breaks = np.flatnonzero(np.diff(ok.astype(np.int8)) != 0) + 1
    parts = []
    for seg in np.split(np.arange(px.size), breaks):
        if seg.size and ok[seg[0]]:
            sx, sy = _step_xy(px[seg], py[seg]) if step else (px[seg], py[seg])
            parts.append(_polyline(*_thin_line(sx, sy)))
    return "".join(parts)


def _finite_xy(x, y) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(xs) & np.isfinite(ys)
    return xs[keep], ys[keep]


def _axis_title(axis: Axis) -> str:
    return f"{axis.label} (log scale)" if axis.log else axis.label


# -- helpers: thinning in pixel space ----------------------------------------------------
def _thin_points(px: np.ndarray, py: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """One point per few-pixel cell, the highest one (the outlier a reader looks for).

    Cells grow until at most ``limit`` remain, so a dense cloud costs a bounded page.
    """
    keep = np.isfinite(px) & np.isfinite(py)
    px, py = px[keep], py[keep]
    cell_px = POINT_CELL_PX
    while px.size > limit:
        cx = np.floor(px / cell_px).astype(np.int64)
        cy = np.floor(py / cell_px).astype(np.int64)
        cell = cx * 1_000_003 + cy
        order = np.lexsort((py, cell))  # within a cell, smallest py (highest on screen) first
        first = np.ones(order.size, dtype=bool)
        first[1:] = cell[order][1:] != cell[order][:-1]
        px, py = px[order[first]], py[order[first]]
        cell_px *= 1.5
    return px, py


def _thin_line(px: np.ndarray, py: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pixel column keep the first, last, lowest and highest point, in x order."""
    keep = np.isfinite(px) & np.isfinite(py)
    px, py = px[keep], py[keep]
    if px.size <= 4:
        return px, py
    col = np.floor(px).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
    ends = np.r_[starts[1:], px.size] - 1
    run_of = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, px.size]))
    # Sorting by (column run, y) puts each run's lowest y first; by (run, -y) its highest.
    lowest = np.lexsort((py, run_of))[starts]
    highest = np.lexsort((-py, run_of))[starts]
    chosen = np.zeros(px.size, dtype=bool)
    chosen[np.r_[starts, ends, lowest, highest]] = True
    return px[chosen], py[chosen]


def _step_xy(px: np.ndarray, py: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Turn points into a staircase: hold each y until the next x."""
    if px.size < 2:
        return px, py
    sx = np.repeat(px, 2)[1:]
    sy = np.repeat(py, 2)[:-1]
    return sx, sy


# -- helpers: shapes ---------------------------------------------------------------------
def _polyline(px: np.ndarray, py: np.ndarray) -> str:
    """SVG path data through the points, in order."""
    pairs = (f"{fmt_num(x)},{fmt_num(y)}" for x, y in zip(px.tolist(), py.tolist(), strict=True))
    return "M" + "L".join(pairs) if px.size else ""


def _points_path(px: np.ndarray, py: np.ndarray, color: str) -> Markup:
    """All dots of a series as one path of tiny circles (far fewer bytes than <circle>s)."""
    r = POINT_RADIUS_PX
    d = "".join(
        f"M{fmt_num(x - r)},{fmt_num(y)}a{r},{r} 0 1,0 {2 * r},0a{r},{r} 0 1,0 {-2 * r},0"
        for x, y in zip(px.tolist(), py.tolist(), strict=True)
    )
    return void("path", d=d, fill=color, fill_opacity=0.7, stroke="none")


def _area_path(px: np.ndarray, top: np.ndarray, bottom: np.ndarray, fill: str, edge: str) -> Markup:
    """A step band between two stacked levels."""
    if px.size == 0:
        return Markup("")
    sx, st = _step_xy(px, top)
    _, sb = _step_xy(px, bottom)
    outline = _polyline(sx, st) + _polyline(sx[::-1], sb[::-1]).replace("M", "L", 1) + "Z"
    return join(
        [
            void("path", d=outline, fill=fill, fill_opacity=0.85, stroke="none"),
            void("path", d=_polyline(sx, st), stroke=edge, stroke_width=1, fill="none"),
        ]
    )


def _swatch(s: _Series, fill: str, x: float, y: float) -> Markup:
    if s.kind == "points":
        return void("circle", cx=x + 8, cy=y, r=3.5, fill=s.color)
    if s.kind == "area":
        return void("rect", x=x, y=y - 6, width=16, height=12, fill=fill, stroke=s.color)
    return void(
        "line",
        x1=x,
        x2=x + 16,
        y1=y,
        y2=y,
        stroke=s.color,
        stroke_width=2.5,
        stroke_dasharray=s.dash,
    )
