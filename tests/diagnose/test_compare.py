"""``prefillscope compare`` as a CI gate, through the real entry point on real run directories."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest
from compare_support import run_cli
from rundirs import WORKLOAD, synth_run

from diagnose.compare import metric_spec, time_blocks, workload_differences
from diagnose.gate import parse_gate, worsening
from diagnose.stats import MIN_UNITS, Sample, compare_stats
from prefillscope.cli import main
from probes.token_gaps import TokenGaps
from runfmt.runinfo import RunInfo
from workloads.errors import InputError


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One configuration run twice, and planted changes of it."""
    root = tmp_path_factory.mktemp("runs")
    return {
        "base": synth_run(root / "base", seed=1),
        "again": synth_run(root / "again", seed=2),
        "slower_itl": synth_run(root / "slower_itl", seed=3, itl_s=0.013),
        "faster_itl": synth_run(root / "faster_itl", seed=4, itl_s=0.007),
        "fewer_tokens": synth_run(root / "fewer_tokens", seed=5, output_tokens=24),
        "other": synth_run(root / "other", seed=6, workload=WORKLOAD | {"groups": 16}),
    }


def test_two_runs_of_one_configuration_pass_their_gates(monkeypatch, capsys, runs) -> None:
    code, out, _ = run_cli(
        monkeypatch, capsys, runs["base"], runs["again"],
        "--gate", "itl_p99:+10%", "--gate", "ttft_p50:+15%", "--json",
    )  # fmt: skip
    assert code == 0
    report = json.loads(out)
    assert report["passed"] is True and report["verdict"] == "pass"
    by_metric = {c["metric"]: c for c in report["comparisons"]}
    assert list(by_metric)[:3] == ["ttft_p50", "ttft_p99", "itl_p50"]  # defaults, in order
    for c in report["comparisons"]:
        assert {"metric", "ratio", "ci_low", "ci_high", "significant", "p_value", "status"} <= set(
            c
        )
    itl = by_metric["itl_p99"]
    # Passed because the whole interval is within the limit, not for want of evidence.
    assert itl["ci_low"] < 1.0 < itl["ci_high"] < 1.10
    assert itl["gate"] == {
        "max_worse_by": 0.1, "failed": False, "verdict": "pass", "text": "itl_p99:+10%"
    }  # fmt: skip
    assert itl["status"] == "not significant"
    # Two seeds are two draws: requests are resampled in time blocks, each interval at
    # least a Student t one (few blocks), and it says so.
    for metric in ("itl_p99", "ttft_p50"):
        method = by_metric[metric]["method"]
        assert method.startswith("cluster bootstrap")
        assert method == "cluster bootstrap" or "Student t interval" in method
    assert any("Student t interval" in c["method"] for c in report["comparisons"])
    assert "seeds differ (BASE 1, NEW 2)" in report["draws"]
    # A p99 of 200 TTFTs rests on 2 of them: shown, but undecided.
    assert by_metric["ttft_p99"]["status"] == "inconclusive"
    assert "at least 1000 requests per run" in by_metric["ttft_p99"]["reason"]


def test_a_gate_its_runs_are_too_small_to_decide_fails_unless_told(monkeypatch, capsys, runs):
    # Throughput in 20 slices of 200 requests varies by about ±10 %: it cannot tell
    # whether NEW lost more than 5 %, so the gate does not pass…
    gate = ("--gate", "output_tokens_per_s:+5%")
    code, out, _ = run_cli(monkeypatch, capsys, runs["base"], runs["again"], *gate, "--json")
    assert code == 1
    report = json.loads(out)
    assert report["passed"] is False and report["verdict"] == "inconclusive"
    tokens = next(c for c in report["comparisons"] if c["metric"] == "output_tokens_per_s")
    assert tokens["gate"]["verdict"] == "inconclusive" and not tokens["gate"]["failed"]
    assert tokens["ci_low"] < 0.95 < tokens["ci_high"]
    assert tokens["needed_requests"] > 200
    assert f"about {tokens['needed_requests']} requests per run" in tokens["reason"]
    # …unless the user says that an undecided gate passes.
    code, out, _ = run_cli(
        monkeypatch, capsys, runs["base"], runs["again"], *gate, "--inconclusive", "pass"
    )
    assert code == 0
    assert "INCONCLUSIVE, counted as a pass (--inconclusive pass)" in out


def test_a_planted_itl_regression_fails_its_gate(monkeypatch, capsys, runs) -> None:
    code, out, _ = run_cli(
        monkeypatch, capsys, runs["base"], runs["slower_itl"], "--gate", "itl_p99:+10%"
    )
    assert code == 1
    itl_row = next(line for line in out.splitlines() if line.startswith("itl_p99"))
    assert "yes" in itl_row and "FAIL >10%" in itl_row
    assert "FAIL: regression beyond its gate (the whole interval): itl_p99 +" in out
    # The same regression within a looser gate passes.
    code, _, _ = run_cli(
        monkeypatch, capsys, runs["base"], runs["slower_itl"], "--gate", "itl_p99:+50%"
    )
    assert code == 0


def test_gates_know_which_way_is_worse(monkeypatch, capsys, runs) -> None:
    # Faster ITL is a significant change, but an improvement: the latency gate holds.
    code, out, _ = run_cli(
        monkeypatch, capsys, runs["base"], runs["faster_itl"], "--gate", "itl_p50:+5%", "--json"
    )
    assert code == 0
    itl = next(c for c in json.loads(out)["comparisons"] if c["metric"] == "itl_p50")
    assert itl["significant"] and itl["ratio"] < 0.8 and itl["worse_by"] < 0
    # A quarter fewer output tokens per second is a throughput regression.
    code, out, _ = run_cli(
        monkeypatch, capsys, runs["base"], runs["fewer_tokens"],
        "--gate", "output_tokens_per_s:+5%", "--gate", "requests_per_s:+5%", "--json",
    )  # fmt: skip
    assert code == 1
    rows = {c["metric"]: c for c in json.loads(out)["comparisons"]}
    tokens = rows["output_tokens_per_s"]
    assert tokens["ratio"] == pytest.approx(0.75, abs=0.03)
    assert tokens["gate"]["failed"] and tokens["higher_is_better"]
    assert not rows["requests_per_s"]["gate"]["failed"]


def test_junit_output_is_xml_with_one_failure(monkeypatch, capsys, runs) -> None:
    code, out, _ = run_cli(
        monkeypatch, capsys, runs["base"], runs["slower_itl"],
        "--gate", "itl_p99:+10%", "--format", "junit",
    )  # fmt: skip
    assert code == 1
    suite = ET.fromstring(out).find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "1"
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert int(suite.get("tests", "0")) == len(cases) == 9
    assert cases["itl_p99"].find("failure") is not None
    assert cases["ttft_p50"].find("failure") is None


def test_markdown_table_and_github_step_summary(monkeypatch, capsys, runs, tmp_path) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    argv = ["prefillscope", "compare", "--resamples", "1000", str(runs["base"]),
            str(runs["again"]), "--metric", "itl_p99", "--metric", "e2e_p95", "--format",
            "markdown"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code in (0, None)
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = lines.index("| metric | base | new | change | 95% CI, % | p | sig. | gate |")
    assert set(lines[header + 1]) <= set("|-: ")
    assert [line.split("|")[1].strip() for line in lines[header + 2 :]] == ["itl_p99", "e2e_p95"]
    written = summary.read_text()
    assert written.startswith("earlier step\n")
    assert out in written


def test_different_workloads_are_refused_unless_forced(monkeypatch, capsys, runs) -> None:
    code, out, err = run_cli(monkeypatch, capsys, runs["base"], runs["other"])
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "workload.groups: 4 vs 16" in err and "--force" in err
    code, out, _ = run_cli(monkeypatch, capsys, runs["base"], runs["other"], "--force")
    assert code == 0
    assert "compared with --force despite workload.groups: 4 vs 16" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gate", "itl_p99:10"], "--gate: 'itl_p99:10' is not METRIC:+X%"),
        (["--gate", "itl_p98:+10%"], "--gate: unknown metric 'itl_p98'"),
        (["--metric", "latency"], "--metric: unknown metric 'latency'"),
        (["--confidence", "1.5"], "--confidence"),
    ],
)
def test_bad_flags_are_one_line_errors(monkeypatch, capsys, runs, args, needle) -> None:
    code, _, err = run_cli(monkeypatch, capsys, runs["base"], runs["again"], *args)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_not_a_run_directory(monkeypatch, capsys, runs, tmp_path) -> None:
    code, _, err = run_cli(monkeypatch, capsys, runs["base"], tmp_path / "missing")
    assert code == 2
    assert "NEW_RUN: no run directory" in err


def test_gate_parsing_and_direction() -> None:
    assert parse_gate("itl_p99:+10%").max_worsening == pytest.approx(0.10)
    assert parse_gate(" ITL_P99 : 2.5 % ").metric.name == "itl_p99"
    assert parse_gate("output_tokens_per_s:+5%").metric.higher_is_better
    with pytest.raises(InputError) as err:
        parse_gate("itl_p99")
    assert err.value.field == "--gate" and "--gate itl_p99:+10%" in str(err.value)
    assert parse_gate("itl_p99:+900%").max_worsening == pytest.approx(9.0)
    assert parse_gate("output_tokens_per_s:+99.5%").max_worsening == pytest.approx(0.995)
    for absurd in ("itl_p99:+900.5%", "itl_p99:+1" + "0" * 30 + "%", "output_tokens_per_s:+100%"):
        with pytest.raises(InputError) as err:
            parse_gate(absurd)
        assert err.value.field == "--gate" and "is no limit for a" in str(err.value)
    assert worsening(metric_spec("ttft_p50"), 1.2) == pytest.approx(0.2)
    assert worsening(metric_spec("requests_per_s"), 0.8) == pytest.approx(0.2)
    assert metric_spec("ttft_sent_p999").source == "ttft_sent_s"


def test_seed_and_run_length_do_not_make_another_workload() -> None:
    spec = {"workload": "system-prompt", "seed": 1, "num_requests": 200, "rate": 10.0}
    longer = spec | {"seed": 2, "num_requests": 1000}

    def info(workload: dict) -> RunInfo:
        return RunInfo.from_json({"workload": workload})

    assert workload_differences(info(spec), info(longer)) == []
    faster = spec | {"rate": 20.0}
    assert workload_differences(info(spec), info(faster)) == ["workload.rate: 10.0 vs 20.0"]
    assert workload_differences(info({}), info(spec))  # unknown cannot be shown to match
    assert workload_differences(None, info(spec))


def _gaps(request: np.ndarray, t_s: np.ndarray, gap_s: np.ndarray) -> TokenGaps:
    ids = np.asarray([f"r{i}" for i in range(int(request.max()) + 1)], dtype=object)
    return TokenGaps(gap_s=gap_s, request=request, t_s=t_s, request_ids=ids)


def test_itl_gaps_are_resampled_in_blocks_of_a_request_lifetime() -> None:
    # 100 requests of 2 s each over 100 s: blocks of 2 s.
    request = np.repeat(np.arange(100), 200)
    t = np.repeat(np.arange(100) * 1.0, 200) + np.tile(np.linspace(0.0, 2.0, 200), 100)
    blocks = time_blocks(_gaps(request, t, np.full(t.size, 0.01)))
    assert blocks.max() + 1 == 51 and (blocks == np.floor(t / 2.0)).all()
    # Six streams spanning a 10 s run: one lifetime is the whole run, so 2 × MIN_UNITS
    # blocks of 0.5 s (narrower than the truth, as the docstring says).
    request = np.repeat(np.arange(6), 1000)
    t = np.tile(np.linspace(0.0, 10.0, 1000), 6)
    blocks = time_blocks(_gaps(request, t, np.full(t.size, 0.01)))
    assert blocks.max() + 1 == 2 * MIN_UNITS + 1 and (blocks == np.floor(t / 0.5)).all()


def test_stalls_shared_by_all_running_requests_need_time_blocks() -> None:
    # A prefill stalls every running request at once. Resampling requests treats the
    # stalls of 40 requests as 40 independent draws and calls A/A pairs different;
    # resampling time blocks keeps each stall event whole.
    rng = np.random.default_rng(41)
    misses = {"requests": 0, "time blocks": 0}
    pairs = 30
    for pair in range(pairs):
        arms = []
        for _ in range(2):
            stalls = np.sort(rng.uniform(0, 60, rng.poisson(60)))
            size = 0.1 * rng.lognormal(0.0, 0.5, stalls.size)  # each prefill its own length
            request = np.repeat(np.arange(40), 500)
            t = np.repeat(rng.uniform(0, 50, 40), 500) + np.tile(np.arange(500) * 0.02, 40)
            event = np.searchsorted(stalls, t, side="right") - 1  # the last stall before t
            hit = (event >= 0) & (t - stalls[np.maximum(event, 0)] < 0.02)
            gap = np.where(hit, size[np.maximum(event, 0)], 0.02 * rng.lognormal(0, 0.1, t.size))
            arms.append(_gaps(request, t, gap))
        for name, units in (("requests", lambda g: g.request), ("time blocks", time_blocks)):
            samples = [Sample.of(g.gap_s, units(g)) for g in arms]
            (c,) = compare_stats(*samples, {"p99": "p99"}, resamples=500, seed=pair)
            misses[name] += c.side(1.0) != 0
    assert misses["time blocks"] <= 0.1 * pairs < 0.3 * pairs <= misses["requests"], misses
