"""``prefillscope.report.simulate_page``: the grid's trade-off page from a result written
by hand (a ``simulate --json`` document, read as ``runfmt.simresult``'s types): one row per
configuration, the Pareto front starred, unknowns as dashes."""

from __future__ import annotations

import re
from dataclasses import replace

from prefillscope.report.simulate_page import COLUMNS, render_page
from runfmt.codec import decode
from runfmt.simresult import SimulateResult


def _row(label: str, ttft99: float | None, itl99: float | None, pareto: bool, **extra) -> dict:
    return {
        "label": label, "gpus": 2, "pareto": pareto, "goodput": 0.875,
        "ttft_s": {"p50": 0.1, "p99": ttft99}, "itl_s": {"p50": 0.01, "p99": itl99},
        "output_tokens_per_s": 14390.4, "disaggregate": None, "kv_transfer_share_of_ttft": 0.0,
        "break_even": None, **extra,
    }  # fmt: skip


RESULT = decode(SimulateResult, {
    "requests": 1200, "model": "llama-8b", "gpu": "h100",
    "link": {"gbps": 100.0}, "kv_transfer": "overlap",
    "configurations": [
        _row("colocated <b>", 0.9, 0.02, True),
        _row("1:1", 0.5, 0.05, True, disaggregate="1:1", kv_transfer_share_of_ttft=0.123,
             break_even={"gbps": 42.5, "note": ""}),
        _row("2:1", None, None, False, disaggregate="2:1", kv_transfer_share_of_ttft=0.0,
             break_even={"gbps": None, "note": "never"}),
    ],
})  # fmt: skip


def _cells(page: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", page, flags=re.S)
    return [re.findall(r"<t[dh]>(.*?)</t[dh]>", row, flags=re.S) for row in rows]


def test_one_row_per_configuration_with_every_figure():
    header, colocated, one_one, two_one = _cells(render_page(RESULT))
    assert header == list(COLUMNS)
    assert colocated == ["colocated &lt;b&gt; ★", "2", "100.0 ms", "900.0 ms", "10.0 ms",
                         "20.0 ms", "87.5%", "14,390", "–", "–"]  # fmt: skip
    assert one_one[0] == "1:1 ★" and one_one[-2:] == ["12.3%", "42.50"]
    assert two_one[0] == "2:1" and two_one[3] == "–" and two_one[-1] == "never"


def test_the_title_says_the_grid_and_the_front_is_drawn_through_starred_points():
    page = render_page(RESULT)
    assert page.startswith("<!DOCTYPE html>")
    assert "simulate: 1,200 requests, llama-8b on h100" in page
    assert "KV link 100 Gb/s, transfer overlap" in page
    single = replace(RESULT, configurations=RESULT.configurations[:1])
    # the note names the front once; the line through two starred points is drawn too
    assert render_page(single).count("Pareto front") == 1
    assert page.count("Pareto front") > 1
