"""``summary.json`` read a part at a time (issue 43: a bench's memory at its end must not
grow with the run's length) is the summary of the whole columns, byte for byte.

A real run — ``prefillscope bench`` against the embedded engine, two request kinds (stall
events), warm-ups, an SLO with an ITL bound (goodput) — is summarised again with parts of
a few rows (every request's chunks split across parts, every quantile found by several
passes of ``runtime.quantiles.Selection``) and from its whole columns; written as
``summary.json`` is written, each is the file the bench wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import runfmt.tables
import runtime.quantiles
from probes.latency import summarize, summarize_frames
from probes.server_summary import server_summary
from probes.slo import Slo
from probes.timeline import server_series
from runfmt.names import CHUNKS_TABLE, CLIENT_TABLE, REQUESTS_TABLE, SUMMARY_JSON
from runfmt.run import Run
from runfmt.rundir import RunDir
from runfmt.summary import Summary

SLO = Slo(ttft_s=0.3, itl_s=0.004, e2e_s=2.0)


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("streamed") / "run"
    command = [
        sys.executable, "-m", "prefillscope", "bench", "--workload", "interference",
        "--num-requests", "120", "--rate", "2", "--concurrency", "12", "--warmup", "4",
        "--engine", "fixed_step_s=0.002", "--gpu-telemetry", "off", "--json",
        "--slo", "ttft=300,itl=4,e2e=2000", "--out", str(out),
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    return out


def _as_written(document: dict, sections: dict, where: Path) -> bytes:
    """``summary.json``'s bytes with the client's ``sections`` in place of the file's."""
    run = RunDir(where, create=True)
    run.write_json(SUMMARY_JSON, Summary.from_sections(document | sections).to_json())
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

    whole = summarize_frames(requests, chunks, client, SLO)
    whole["server"] = server_summary(
        server_series(bench_run), requests, probe=document["server"]["probe"], chunks=chunks
    )
    monkeypatch.setattr(runfmt.tables, "PART_READ_ROWS", 301)  # requests split across parts
    monkeypatch.setattr(runtime.quantiles, "SELECT_CAP", 64)  # and histogram passes
    streamed = summarize(bench_run, SLO)
    streamed["server"] = server_summary(
        server_series(bench_run),
        lambda: tables.parts(REQUESTS_TABLE),
        probe=document["server"]["probe"],
        chunks=lambda: tables.parts(CHUNKS_TABLE),
    )
    assert sum(1 for _ in tables.parts(CHUNKS_TABLE)) > 50
    assert _as_written(document, whole, tmp_path / "whole") == written
    assert _as_written(document, streamed, tmp_path / "streamed") == written
