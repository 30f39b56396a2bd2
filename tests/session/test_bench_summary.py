"""``session.bench_summary``: ``summary.json`` of a finished run from its closed tables."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest
from run_shapes import steady_streams
from rundirs import run_info, write_run

from loadgen.load_options import LoadResult
from runfmt.names import SUMMARY_JSON
from runfmt.rundir import RunDir
from runtime.clock import RunClock
from session.bench_options import BenchOptions
from session.bench_summary import write_summary

OFF = {"server_metrics": {"status": {"name": "server_metrics", "state": "off"}}}


def test_the_summary_counts_the_recorded_measured_kinds_and_adds_the_picked_percentiles(tmp_path):
    # four streams, 5 tokens each, one every 0.1 s: every ITL gap is 0.1 s; one warm-up
    records, chunks = steady_streams(4, 5, 0.1)
    kinds = ("decode", "decode", "long", "decode")
    records = [
        replace(r, kind=k, warmup=i == 0)
        for i, (r, k) in enumerate(zip(records, kinds, strict=True))
    ]
    path = write_run(tmp_path / "run", records, chunks, {"probes": OFF})
    options = BenchOptions("test", percentiles=(("itl",), (50.0, 99.0)))
    run = RunDir(path)
    info = run_info({"probes": OFF})
    written = asyncio.run(write_summary(run, info, LoadResult(), options, None, RunClock()))
    on_disk = json.loads((path / SUMMARY_JSON).read_text())
    assert on_disk == written.to_json() and isinstance(on_disk["format_version"], int)
    # the recorded requests past warm-up, not the plan: they sum to the requests counted
    assert on_disk["requests"]["by_kind"] == {"decode": 2, "long": 1}
    assert on_disk["requests"]["total"] == 3
    assert on_disk["percentiles"]["itl_s"] == pytest.approx({"p50": 0.1, "p99": 0.1})
    assert on_disk["server"]["available"] is False


def test_without_picked_percentiles_there_is_no_percentiles_section(tmp_path):
    records, chunks = steady_streams(1, 3, 0.1)
    path = write_run(tmp_path / "run", records, chunks, {"probes": OFF})
    written = asyncio.run(
        write_summary(
            RunDir(path), run_info({"probes": OFF}), LoadResult(),
            BenchOptions("test"), None, RunClock(),
        )
    )  # fmt: skip
    assert written.percentiles is None and "percentiles" not in written.to_json()
