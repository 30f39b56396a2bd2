"""The HTML report: self-contained, escaped, every plot present with the right series."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from run_shapes import HOSTILE, RunShape
from rundirs import large_run, report_run

from prefillscope.report.data import UNSPLIT_LAYER, load_report_data
from prefillscope.report.html import render_html
from prefillscope.report.svg import MAX_POINTS
from runfmt.rundir import RunDir
from workloads.errors import InputError

SVG_NS = "{http://www.w3.org/2000/svg}"
PLOTS = ("itl-cdf", "itl-time", "ttft-cached", "kv-pool")


class _Tags(HTMLParser):
    """Every start tag and its attributes, to check what the browser would fetch or run."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append((tag, dict(attrs)))


def _page(tmp_path: Path, shape: RunShape | None = None) -> str:
    return render_html(load_report_data(report_run(tmp_path / "run", shape)))


def _svgs(page: str) -> dict[str, ET.Element]:
    """Each chart's SVG, parsed as XML (which also proves the markup is well formed)."""
    found = re.findall(r"<svg\b.*?</svg>", page, flags=re.S)
    roots = [ET.fromstring(svg) for svg in found]
    return {root.get("id"): root for root in roots}


def _series(svg: ET.Element) -> list[ET.Element]:
    return [g for g in svg.iter(f"{SVG_NS}g") if g.get("class") == "series"]


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory) -> str:
    shape = RunShape(model=HOSTILE, error_message=HOSTILE)
    return _page(tmp_path_factory.mktemp("hostile"), shape)


def test_page_is_self_contained_and_has_no_script(hostile_page: str) -> None:
    parser = _Tags()
    parser.feed(hostile_page)
    tags = {tag for tag, _ in parser.tags}
    assert "script" not in tags and "link" not in tags and "iframe" not in tags
    assert "<script" not in hostile_page.lower()
    for tag, attrs in parser.tags:
        for name in ("src", "href"):
            assert not re.match(r"\s*(https?:)?//", attrs.get(name) or ""), (tag, attrs)
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
    assert "@import" not in hostile_page and "url(http" not in hostile_page


def test_every_string_from_the_run_is_escaped(hostile_page: str) -> None:
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    # The model name (run.json), each error message (requests), the diagnosis evidence.
    assert hostile_page.count(escaped) >= 1 + 3 + 1
    assert f"model</dt><dd>{escaped}</dd>" in hostile_page


def test_each_plot_has_its_series(hostile_page: str) -> None:
    svgs = _svgs(hostile_page)
    assert set(PLOTS) <= set(svgs)
    names = {plot: [g.get("data-series") for g in _series(svgs[plot])] for plot in PLOTS}
    assert names["itl-cdf"][:3] == ["all tokens", "decode", "long-prompt"]
    assert [n.split()[0] for n in names["itl-cdf"][3:]] == ["p99", "p99.9"]
    assert names["itl-time"] == [
        "per-token gap",
        "p50 per window",
        "p99 per window",
        "long-prompt arrivals (6)",
    ]
    assert names["ttft-cached"] == ["decode", "long-prompt"]
    assert names["kv-pool"] == [
        "active (measured)",
        "reclaimable (measured)",
        "free (measured)",
    ]


def test_long_prompt_arrivals_are_drawn_at_their_send_times(tmp_path: Path) -> None:
    data = load_report_data(report_run(tmp_path / "run"))
    svg = _svgs(render_html(data))["itl-time"]
    marks = next(g for g in _series(svg) if g.get("data-kind") == "vlines")
    d = marks.find(f"{SVG_NS}path").get("d")
    assert d.count("M") == 6 == int(data.requests["long_prompt"].sum())


def test_vllm_pool_shows_the_unsplit_remainder_as_unknown(tmp_path: Path) -> None:
    page = _page(tmp_path, RunShape(pool="vllm"))
    series = _series(_svgs(page)["kv-pool"])
    assert [g.get("data-series") for g in series] == [
        "active (derived)",
        f"{UNSPLIT_LAYER} (split unknown)",
    ]
    assert series[1].find(f"{SVG_NS}path").get("fill") == "url(#kv-pool-hatch)"
    assert "free (measured)" not in page
    # The server section carries the probe's provenance next to each figure.
    row = re.search(r"<tr><td>KV usage \(active share\)</td>(.*?)</tr>", page).group(1)
    assert "mean " in row and "max " in row and "<td>measured</td>" in row
    row = re.search(r"<tr><td>preemptions</td>(.*?)</tr>", page).group(1)
    assert "<td>unknown</td><td>unknown</td>" in row  # not exposed here: unknown, never 0


def test_missing_pool_diagnosis_and_summary_are_said_not_drawn_as_zero(tmp_path: Path) -> None:
    page = _page(tmp_path, RunShape(pool=None, diagnosis=False, summary=False))
    assert _series(_svgs(page)["kv-pool"]) == []
    assert "the server exposed no KV-pool metrics" in page
    assert "the KV pool is unknown" in page
    assert "The diagnosis could not be run" in page and "prefillscope diagnose " in page
    assert "summary was recomputed from the tables" in page
    assert "ITL (per token)" in page  # the recomputed summary is shown


def test_metrics_of_an_unknown_server_leave_the_pool_unknown(tmp_path: Path) -> None:
    run_path = report_run(tmp_path / "run", RunShape(pool=None))
    run = RunDir(run_path)
    run.table("server_metrics").append(
        {"t_s": 0.5, "metric": "myengine_blocks_used", "labels": "{}", "value": 12.0}
    )
    run.close()
    data = load_report_data(run_path)
    assert data.pool is None
    assert any("no known flavour or mapping" in note for note in data.notes)


def test_a_client_limited_run_says_so_first(tmp_path: Path) -> None:
    run_path = report_run(tmp_path / "run")
    run = RunDir(run_path)
    summary = run.read_json("summary.json")
    summary["client"] |= {"limited": True, "reasons": ["dispatch lag p99 7.0 ms > 5 ms"]}
    run.write_json("summary.json", summary)
    page = render_html(load_report_data(run_path))
    banner = re.search(r'<div class="banner tone-warn">(.*?)</div>', page).group(1)
    assert "The client limited this run (dispatch lag p99 7.0 ms &gt; 5 ms)" in banner
    assert page.index(banner) < page.index("<h2>Summary</h2>")


@pytest.mark.parametrize(
    ("status", "says"),
    [("interrupted", "This run was interrupted"), ("running", "This run never finished")],
)
def test_unfinished_runs_are_marked(tmp_path: Path, status: str, says: str) -> None:
    page = _page(tmp_path, RunShape(status=status))
    assert f'class="badge tone-warn">{status}<' in page
    banner = re.search(r'<div class="banner tone-warn">(.*?)</div>', page).group(1)
    assert banner.startswith(says) and "129 requests" in banner


def test_diagnosis_table_colours_each_status(hostile_page: str) -> None:
    for status, tone in (
        ("supported", "bad"),
        ("not supported", "good"),
        ("inconclusive", "warn"),
        ("weakened", "mild"),
        ("as expected", "good"),
    ):
        assert f'class="badge tone-{tone}">{status}<' in hostile_page
    assert "prefillscope diagnose ab --chunks 512,2048" in hostile_page
    assert 'tone-bad">hard failure<' in hostile_page


def test_not_a_run_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="RUN_DIR"):
        load_report_data(tmp_path / "nope")
    with pytest.raises(InputError, match=r"no run\.json"):
        load_report_data(tmp_path)


def test_a_hundred_thousand_requests_make_a_bounded_page(tmp_path: Path) -> None:
    run = large_run(tmp_path / "big", requests=100_000, tokens_per_request=10)
    data = load_report_data(run)
    assert data.gaps.gap_s.size == 1_000_000
    page = render_html(data)
    assert len(page) < 1_500_000
    svgs = _svgs(page)
    for plot in ("itl-time", "ttft-cached"):
        dots = sum(
            len(re.findall(r"a[\d.]+,", g.find(f"{SVG_NS}path").get("d"))) // 2
            for g in _series(svgs[plot])
            if g.get("data-kind") == "points"
        )
        assert 0 < dots <= MAX_POINTS
    assert "long-prompt arrivals" in page


def test_the_answer_comes_before_the_tables_and_the_plots(tmp_path: Path) -> None:
    """Issue 41: the decision box sat ~2,900 px down, below four plots."""
    page = _page(tmp_path)
    answer = page.index("<h2>The answer</h2>")
    assert answer < page.index("Decision: ") < page.index("<h2>Summary</h2>")
    assert page.index('class="decision"') < page.index("<svg")
    assert page.index("<svg") < page.index("<h2>Diagnosis: every finding</h2>")
