"""``prefillscope simulate``: the grid on the virtual clock, through the real command line."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from engine_util import prompt

from perfmodel.config import EngineConfig
from runfmt.codec import encode
from runfmt.slo import Slo
from runfmt.summary_sections import Stats
from session.sim_workload import SimWorkload, load_workload
from session.simulate import GridPoint, SimulateSpec, _score, run_point, simulate_grid
from simengine.core import EngineCore, EngineRequest
from simengine.driver import VirtualDriver
from simengine.kv_link import LinkSpec

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "simulate"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def test_grid_at_equal_gpus_shows_the_pd_trade_off(tmp_path: Path) -> None:
    page = tmp_path / "grid.html"
    done = _cli(
        "--workload", "interference", "--num-requests", "30", "--chunks", "512,2048",
        "--disaggregate", "1:1", "--gpus", "2", "--no-break-even", "--json",
        "--html", str(page),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    rows = {row["label"]: row for row in result["configurations"]}
    assert set(rows) == {
        "mono ×2, chunk 512", "P/D 1:1, chunk 512", "mono ×2, chunk 2048", "P/D 1:1, chunk 2048"
    }  # fmt: skip
    assert all(row["gpus"] == 2 for row in rows.values())
    assert all(row["completed"] == row["requests"] == result["requests"] for row in rows.values())
    for chunk in (512, 2048):
        mono, pd = rows[f"mono ×2, chunk {chunk}"], rows[f"P/D 1:1, chunk {chunk}"]
        # decode workers never run a prompt chunk: the worst gap is one decode step, where
        # a monolithic step carrying a chunk takes more than two
        assert pd["itl_s"]["max"] < 1.2 * pd["itl_s"]["p50"]
        assert mono["itl_s"]["max"] > 2 * pd["itl_s"]["max"]
        assert pd["itl_s"]["p99"] <= mono["itl_s"]["p99"] * 1.05
        # ... and each request's first token waits for its transfer (the mean: the p50 of
        # 32 short stream prompts and 30 long ones sits on the cliff between the two)
        assert pd["ttft_s"]["mean"] > mono["ttft_s"]["mean"]
        assert 0 < pd["kv_transfer_share_of_ttft"] < 1 and mono["kv_transfer_share_of_ttft"] == 0
    assert any(row["pareto"] for row in rows.values())
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert html.count("<tr>") == 1 + len(rows)


def _one_request_workload() -> SimWorkload:
    return SimWorkload(timed=[(0.0, EngineRequest("r", prompt(2048, 1), 16, ignore_eos=True))])


def test_break_even_bracket_holds_on_both_sides() -> None:
    """At the reported link speed P/D does as well as monolithic; below the bracket, not."""
    streams = [(0.0, EngineRequest(f"s{i}", prompt(64, i), 400, ignore_eos=True)) for i in range(2)]
    longs = [
        (0.3 * i, EngineRequest(f"p{i}", prompt(4096, 10 + i), 8, ignore_eos=True))
        for i in range(1, 7)
    ]
    workload = SimWorkload(timed=streams + longs)
    # monolithic: the long prefills stretch the streams' gaps past 20 ms; P/D's decode
    # worker never runs them, and its TTFTs stay under 2 s unless the link is slow
    spec = SimulateSpec(EngineConfig(), [2048], [(1, 1)], gpus=2, slo=Slo(ttft_s=2.0, itl_s=0.02))
    result = simulate_grid(spec, workload)
    mono, pd = result.configurations
    be = pd.break_even
    assert be is not None and be.gbps is not None, be
    target = _score(mono, spec.slo)
    lo, hi = be.bracket_gbps
    assert hi == be.gbps and 1.0 < lo < hi < 10_000.0
    for gbps, meets in ((hi, True), (lo, False)):
        probe = dataclasses.replace(spec, link=LinkSpec(gbps))
        row = run_point(probe, GridPoint(2048, ratio=(1, 1)), workload)
        assert (_score(row, spec.slo) >= target) is meets, gbps


def test_closed_loop_users_release_their_next_request_when_one_ends() -> None:
    queue = [EngineRequest(f"q{i}", prompt(100, i), 4, ignore_eos=True) for i in range(4)]
    workload = SimWorkload(queue=queue, users=2)
    arrivals, release = workload.start()
    assert [req.request_id for _, req in arrivals] == ["q0", "q1"]
    result = VirtualDriver(EngineCore(EngineConfig(fixed_step_s=0.01))).run(
        arrivals, release=release
    )
    timings = result.requests
    assert set(timings) == {"q0", "q1", "q2", "q3"}
    assert timings["q2"].arrival_s == pytest.approx(timings["q0"].token_times[-1])
    assert timings["q3"].arrival_s == pytest.approx(timings["q1"].token_times[-1])


def test_a_run_directory_replays_its_recorded_sends(tmp_path: Path) -> None:
    from run_shapes import steady_streams
    from rundirs import write_run

    records, chunks = steady_streams(4, 20, 0.01, prompt_tokens=300)
    for i, record in enumerate(records):
        record.sent_s = 0.5 + 0.1 * i
    run = write_run(tmp_path / "run", records, chunks)
    workload = load_workload(str(run), [], {}, EngineConfig())
    arrivals, _ = workload.start()
    assert [t for t, _ in arrivals] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert [len(req.prompt_token_ids) for _, req in arrivals] == [300] * 4
    assert [req.max_tokens for _, req in arrivals] == [20] * 4
    result = simulate_grid(SimulateSpec(EngineConfig(), [512]), workload)
    (row,) = result.configurations
    assert row.completed == len(arrivals)


def test_goodput_counts_requests_meeting_every_bound() -> None:
    spec = SimulateSpec(EngineConfig(fixed_step_s=0.01), [2048], slo=Slo(ttft_s=0.012))
    early = EngineRequest("early", prompt(64, 1), 3, ignore_eos=True)
    late = EngineRequest("late", prompt(64, 2), 3, ignore_eos=True)
    workload = SimWorkload(timed=[(0.0, early), (0.005, late)])  # late waits for a step end
    (row,) = simulate_grid(spec, workload).configurations
    assert row.goodput == 0.5


def test_a_configuration_carries_benchs_latencies_by_benchs_rules() -> None:
    """TTFT, ITL, TPOT and E2E with mean, p50, p90, p99 and max, as summary.json has them:
    TPOT is (E2E - TTFT)/(n - 1), ITL the per-token gaps, a TPOT SLO judged per request."""
    spec = SimulateSpec(EngineConfig(fixed_step_s=0.01), [2048], slo=Slo(tpot_s=0.015))
    alone = EngineRequest("alone", prompt(64, 1), 5, ignore_eos=True)
    crowd = [EngineRequest(f"c{i}", prompt(64, 10 + i), 5, ignore_eos=True) for i in range(3)]
    workload = SimWorkload(timed=[(0.0, alone), *((1.0, r) for r in crowd)])
    (row,) = simulate_grid(spec, workload).configurations
    written = encode(row)  # the row as simulate --json writes it
    for metric in ("ttft_s", "itl_s", "tpot_s", "e2e_s"):
        assert {"mean", "p50", "p90", "p99", "max", "count"} <= set(written[metric])
        assert isinstance(row.latencies[metric], Stats)  # summary.json's type
    # fixed 10 ms steps: every gap and every TPOT is one step, TTFT one step, E2E five
    itl = row.latencies["itl_s"]
    assert itl.count == 4 * 4 and itl.max == pytest.approx(0.01)
    assert row.statistic("tpot_s", "mean") == pytest.approx(0.01)
    assert row.statistic("e2e_s", "max") == pytest.approx(0.05)
    assert row.goodput == 1.0
    strict = SimulateSpec(EngineConfig(fixed_step_s=0.01), [2048], slo=Slo(tpot_s=0.009))
    assert simulate_grid(strict, workload).configurations[0].goodput == 0.0


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--gpus", "3", "--disaggregate", "1:1"], "--gpus"),
        (["--chunks", "0,512"], "--chunks"),
        (["--disaggregate", "1"], "--disaggregate"),
        (["--no-monolithic"], "--no-monolithic"),
        (["--slo", "ttft=fast"], "--slo"),
        (["--kv-transfer", "sometimes", "--disaggregate", "1:1"], "--kv-transfer"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: list[str], field: str) -> None:
    done = _cli("--workload", "few-shot", "--num-requests", "3", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and field in done.stderr
