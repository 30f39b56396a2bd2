"""``summary.json`` read a part at a time (issue 43: a bench's memory at its end must not
grow with the run's length) is the summary of the whole columns, byte for byte.

A real run — ``prefillscope bench`` against the embedded engine, two request kinds (stall
events), warm-ups, an SLO with an ITL bound (goodput), vLLM's extra percentiles — is
summarised again with parts of a few rows (every request's chunks split across parts,
every scrape of the server's samples too, every quantile found by several passes of
``runtime.quantiles.Selection``) and from its whole columns; written as ``summary.json``
is written, each is the file the bench wrote. The bench's own summary step, run again
with every whole read of the requests, chunks and server samples refused, writes the
same file: no part of it reads a long run's table whole."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import runfmt.tables
import runtime.quantiles
from loadgen.load_options import LoadResult
from probes.latency import (
    completed_mask,
    latency_columns,
    measured,
    summarize,
    summarize_frames,
    summary_columns,
)
from probes.normalise import ServerSeries
from probes.percentiles import METRICS, label, picked_percentiles
from probes.server_summary import server_summary
from probes.timeline import run_mapping, server_series
from probes.token_gaps import token_gaps
from runfmt.codec import decode, frozen_map
from runfmt.names import (
    CHUNKS_TABLE,
    CLIENT_TABLE,
    REQUESTS_TABLE,
    SERVER_METRICS_TABLE,
    SUMMARY_JSON,
)
from runfmt.run import Run
from runfmt.run_sections import ProbeState
from runfmt.rundir import RunDir
from runfmt.slo import Slo
from runfmt.summary import Summary
from runfmt.tables import RunTables
from runtime.clock import RunClock
from runtime.quantiles import quantile
from session.bench_options import BenchOptions
from session.bench_summary import write_summary

SLO = Slo(ttft_s=0.3, itl_s=0.004, e2e_s=2.0)
PERCENTILES = (25.0, 50.0, 99.0, 99.9)
#: The tables a bench's end reads a part at a time (the client's health samples, a few a
#: second, are read whole).
STREAMED = (REQUESTS_TABLE, CHUNKS_TABLE, SERVER_METRICS_TABLE)


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("streamed") / "run"
    # What is checked needs the rows (120 long prompts and their decode streams: a chunk
    # table of over 50 parts), not the time they take: at 8 req/s they arrive over 15 s.
    command = [
        sys.executable, "-m", "prefillscope", "bench", "--workload", "interference",
        "--num-requests", "120", "--rate", "8", "--concurrency", "12", "--warmup", "4",
        "--engine", "fixed_step_s=0.002", "--gpu-telemetry", "off", "--json",
        "--slo", "ttft=300,itl=4,e2e=2000", "--out", str(out),
        "--percentile-metrics", ",".join(METRICS), "--metric-percentiles", "25,50,99,99.9",
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    return out


def _as_written(summary: Summary, where: Path) -> bytes:
    """``summary.json``'s bytes as the bench writes ``summary``."""
    run = RunDir(where, create=True)
    run.write_json(SUMMARY_JSON, summary.to_json())
    return (where / SUMMARY_JSON).read_bytes()


def test_parts_of_a_few_rows_and_whole_columns_give_the_file_the_bench_wrote(
    bench_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = (bench_run / SUMMARY_JSON).read_bytes()
    document = json.loads(written)
    tables = Run.at(bench_run).tables
    requests, chunks, client = (
        tables.columns(name) for name in (REQUESTS_TABLE, CHUNKS_TABLE, CLIENT_TABLE)
    )
    assert len(chunks) > 1000 and document["stalls"]["events"] > 0  # what is being checked
    assert document["requests"]["warmup_excluded"] == 4
    assert 0 < document["goodput"]["requests"] < document["requests"]["completed"]

    run = Run.at(bench_run)
    whole = summarize_frames(requests, chunks, client, SLO)
    samples = ServerSeries.from_samples(tables.columns(SERVER_METRICS_TABLE), run_mapping(run))
    assert len(samples.frame) > 20  # scrapes: each split across parts below
    whole = replace(
        whole,
        percentiles=frozen_map(_percentiles_of_whole_columns(requests, chunks)),
        server=server_summary(
            samples, requests, probe=decode(ProbeState, document["server"]["probe"]), chunks=chunks
        ),
    )
    monkeypatch.setattr(runfmt.tables, "PART_READ_ROWS", 301)  # requests split across parts
    monkeypatch.setattr(runtime.quantiles, "SELECT_CAP", 64)  # and histogram passes
    streamed = summarize_frames(
        lambda: tables.parts(REQUESTS_TABLE, summary_columns()),
        lambda: tables.parts(CHUNKS_TABLE),
        client,
        SLO,
        (tuple(METRICS), PERCENTILES),  # in the summary's own passes
    )
    assert streamed == replace(summarize(bench_run, SLO), percentiles=streamed.percentiles)
    assert streamed.percentiles == frozen_map(  # and on their own
        picked_percentiles(
            lambda: tables.parts(REQUESTS_TABLE),
            lambda: tables.parts(CHUNKS_TABLE),
            tuple(METRICS),
            PERCENTILES,
        )
    )
    streamed = replace(
        streamed,
        server=server_summary(
            server_series(bench_run),
            lambda: tables.parts(REQUESTS_TABLE),
            probe=decode(ProbeState, document["server"]["probe"]),
            chunks=lambda: tables.parts(CHUNKS_TABLE),
        ),
    )
    assert sum(1 for _ in tables.parts(CHUNKS_TABLE)) > 50
    assert sum(1 for _ in tables.parts(SERVER_METRICS_TABLE)) > len(samples.frame)
    assert _as_written(whole, tmp_path / "whole") == written
    assert _as_written(streamed, tmp_path / "streamed") == written


def _percentiles_of_whole_columns(requests, chunks) -> dict:
    """vLLM's extra percentiles by their definition: ``quantile`` over each whole column
    of the completed measured requests, and over their ITL gaps."""
    runs = measured(requests)
    ok = completed_mask(runs)
    latencies = latency_columns(runs)
    out = {}
    for column in METRICS.values():
        if column == "itl_s":
            values = token_gaps(chunks, runs["id"][ok]).gap_s
        else:
            values = latencies[column][ok]
        out[column] = {label(p): quantile(values, p / 100) for p in PERCENTILES}
    return out


def test_the_bench_summary_reads_no_long_table_whole(
    bench_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_copy = tmp_path / "run"
    shutil.copytree(bench_run, run_copy)
    (run_copy / SUMMARY_JSON).unlink()
    whole_reads: list[str] = []
    columns, read = RunTables.columns, RunTables._read

    def refused(reader):
        def reading(self: RunTables, name: str):
            if name in STREAMED:
                whole_reads.append(name)
                raise AssertionError(f"{name} read whole at a bench's end")
            return reader(self, name)

        return reading

    monkeypatch.setattr(RunTables, "columns", refused(columns))
    monkeypatch.setattr(RunTables, "_read", refused(read))
    monkeypatch.setattr(runfmt.tables, "PART_READ_ROWS", 301)
    monkeypatch.setattr(runtime.quantiles, "SELECT_CAP", 64)
    parts_read: list[str] = []
    parts = RunTables.parts

    def counted(self: RunTables, name: str, columns=None):
        parts_read.append(name)
        return parts(self, name, columns)

    monkeypatch.setattr(RunTables, "parts", counted)
    options = BenchOptions("interference", slo=SLO, percentiles=(tuple(METRICS), PERCENTILES))
    info = Run.at(run_copy).info
    asyncio.run(write_summary(RunDir(run_copy), info, LoadResult(), options, None, RunClock()))
    assert whole_reads == []
    assert set(STREAMED) <= set(parts_read)  # what is being checked: each was read, in parts
    assert (run_copy / SUMMARY_JSON).read_bytes() == (bench_run / SUMMARY_JSON).read_bytes()
