"""``compare`` verdicts on the runs that used to fool or crash it: a 7× tail regression of ten
requests, five-request runs, failed and empty runs, runs without ITL gaps, and gates the
data cannot decide — through the real entry point, in every output format."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest
from compare_support import run_cli
from rundirs import WORKLOAD, synth_run, write_run

from loadgen.records import ChunkEvent, ErrorKind, RequestRecord, Status

INTERFERENCE = {"name": "interference", "concurrency": 6, "long_prompt_len": 12000}
FORMATS = ("table", "markdown", "junit", "json")


def interference_run(
    path: Path, *, stall_s: float, stalls_per_prompt: int, seed: int, prompts: int = 4
) -> Path:
    """Six decode streams and ``prompts`` 12k-token prompts every 0.5 s, as the embedded
    engine runs them: each prompt's prefill stalls every stream for ``stalls_per_prompt``
    steps of ``stall_s`` (many short chunks at a small budget, a few long ones at a large
    one). Four prompts and streams of 400 tokens make the issue's ten-request runs."""
    rng = np.random.default_rng(seed)
    records, chunks = [], []
    prompt_at = 1.7 + 0.5 * np.arange(prompts) + rng.uniform(0, 0.2, prompts)
    tokens = 400 * prompts // 4
    for i in range(6):
        rid = f"s{i}"
        gaps = 0.0115 * rng.lognormal(0.0, 0.05, tokens - 1)
        for t in prompt_at:
            k = int(t / 0.0115) + i
            gaps[k : k + stalls_per_prompt] = stall_s * rng.lognormal(0.0, 0.02, stalls_per_prompt)
        times = 0.07 + np.concatenate([[0.0], np.cumsum(gaps)])
        chunks += [ChunkEvent(rid, float(t), 1) for t in times]
        records.append(
            RequestRecord(
                id=rid, kind="decode", intended_s=0.0, sent_s=0.0, first_token_s=float(times[0]),
                end_s=float(times[-1]), prompt_tokens=100, output_tokens=tokens,
            )
        )  # fmt: skip
    for i, sent in enumerate(prompt_at):
        rid = f"long{i}"
        times = sent + 1.0 + 0.03 * np.arange(16)
        chunks += [ChunkEvent(rid, float(t), 1) for t in times]
        records.append(
            RequestRecord(
                id=rid, kind="long-prompt", intended_s=float(sent), sent_s=float(sent),
                first_token_s=float(times[0]), end_s=float(times[-1]), prompt_tokens=12000,
                output_tokens=16,
            )
        )  # fmt: skip
    return write_run(path, records, chunks, {"workload": INTERFERENCE | {"seed": seed}})


def test_a_7x_tail_regression_never_passes_and_fails_once_the_run_can_see_it(
    monkeypatch, capsys, tmp_path
):
    # Budget 512: 24 short stalls per prompt; budget 8192: two long ones. Pooled, the p99
    # of ~2450 gaps moves from a short stall to a long one: about 7.4×. But NEW's p99
    # rests on 2 % of its gaps, stalled by four prefills in ten seconds: resampled in
    # time, a run with two of them has a normal p99. The gate cannot pass it (exit 1)…
    runs = {
        (size, budget): interference_run(
            tmp_path / f"{size}-{budget}", stall_s=stall, stalls_per_prompt=stalls,
            seed=seed, prompts=size,
        )
        for size in (4, 40)
        for budget, stall, stalls, seed in ((512, 0.085, 24, 1), (8192, 0.63, 2, 2))
    }  # fmt: skip
    gate = ("--gate", "itl_p99:+25%", "--metric", "itl_p99", "--json")
    code, out, _ = run_cli(monkeypatch, capsys, runs[4, 512], runs[4, 8192], *gate)
    report = json.loads(out)
    (itl,) = report["comparisons"]
    assert code == 1 and report["passed"] is False
    assert 6.5 < itl["ratio"] < 8.5
    assert itl["ci_low"] < 1.25 < itl["ratio"] < itl["ci_high"]
    assert itl["gate"]["verdict"] == "inconclusive"
    assert f"about {itl['needed_requests']} requests per run would separate" in itl["reason"]
    # …and runs ten times as long, with 40 prefills each, fail it on evidence.
    code, out, _ = run_cli(monkeypatch, capsys, runs[40, 512], runs[40, 8192], *gate)
    (itl,) = json.loads(out)["comparisons"]
    assert code == 1 and itl["gate"]["verdict"] == "fail" and itl["significant"]
    assert 1.25 < itl["ci_low"] < itl["ratio"] < itl["ci_high"]
    code, out, _ = run_cli(monkeypatch, capsys, runs[40, 512], runs[40, 8192], *gate[:2])
    itl_row = next(line for line in out.splitlines() if line.startswith("itl_p99"))
    assert "yes" in itl_row and "FAIL >25%" in itl_row


@pytest.mark.parametrize("output_format", FORMATS)
def test_five_request_runs_compare_without_a_traceback(
    monkeypatch, capsys, tmp_path, output_format
):
    base = synth_run(tmp_path / "a", requests=5, seed=1, rate=5.0)
    new = synth_run(tmp_path / "b", requests=5, seed=2, rate=5.0)
    args = (base, new, "--format", output_format)
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert (code, err) == (0, "")  # no gate: nothing to fail
    assert "Traceback" not in out
    code, out, err = run_cli(monkeypatch, capsys, *args, "--gate", "itl_p99:+25%")
    assert code == 1 and err == ""  # a gate that cannot see does not pass
    if output_format == "json":
        rows = {c["metric"]: c for c in json.loads(out)["comparisons"]}
        assert {c["status"] for c in rows.values()} == {"inconclusive"}
        assert "BASE and NEW: 5 requests with ITL gaps (fewer than 10)" in rows["itl_p99"]["reason"]
        # two seeds: requests are resampled in time blocks, each of these a block of its own
        assert "BASE and NEW: 5 time blocks (fewer than 10)" in rows["ttft_p50"]["reason"]
    elif output_format == "junit":
        suite = ET.fromstring(out).find("testsuite")
        assert suite is not None and suite.get("failures") == "1"
        failure = suite.find("testcase[@name='itl_p99']/failure")
        assert failure is not None and "inconclusive" in failure.get("message", "")
    else:
        assert "itl_p99: gate inconclusive: BASE and NEW: 5 requests with ITL gaps" in out
        assert "INCONCLUSIVE, counted as a failure: the data cannot decide itl_p99" in out
    code, out, _ = run_cli(monkeypatch, capsys, *args, "--gate", "itl_p99:+25%",
                           "--inconclusive", "pass")  # fmt: skip
    assert code == 0
    if output_format == "junit":
        suite = ET.fromstring(out).find("testsuite")
        assert suite is not None and suite.get("failures") == "0"
        assert suite.find("testcase[@name='itl_p99']/skipped") is not None


def _plain_run(path: Path, *, requests: int, failed: int = 0, tokens: int = 8, **fields) -> Path:
    """``requests`` completed requests of ``tokens`` tokens and ``failed`` failed ones."""
    records, chunks = [], []
    for i in range(requests):
        first = 0.1 * i + 0.05
        times = first + 0.01 * np.arange(tokens)
        chunks += [ChunkEvent(f"r{i}", float(t), 1) for t in times]
        record = {"intended_s": 0.1 * i, "sent_s": 0.1 * i, "first_token_s": first,
                  "end_s": float(times[-1]), "output_tokens": tokens} | fields  # fmt: skip
        records.append(RequestRecord(id=f"r{i}", **record))
    for i in range(failed):
        records.append(
            RequestRecord(
                id=f"e{i}", intended_s=0.1 * i, sent_s=0.1 * i, end_s=0.1 * i + 0.01,
                status=Status.ERROR, error_kind=ErrorKind.HTTP_5XX, http_status=503,
            )
        )  # fmt: skip
    return write_run(path, records, chunks, {"workload": WORKLOAD | {"seed": 0}})


@pytest.mark.parametrize("output_format", FORMATS)
def test_degenerate_runs_give_rows_that_say_what_is_missing(
    monkeypatch, capsys, tmp_path, output_format
):
    base = _plain_run(tmp_path / "base", requests=30)
    cases = {  # NEW, what its rows say, the metric gated
        "all_failed": (_plain_run(tmp_path / "failed", requests=0, failed=5),
                       "NEW has no completed request (of 5)", "itl_p50"),
        "one": (_plain_run(tmp_path / "one", requests=1), "1 requests (fewer than 10)",
                "itl_p50"),
        "no_gaps": (_plain_run(tmp_path / "no_gaps", requests=30, tokens=1),
                    "NEW has no ITL gaps (no request streamed two tokens)", "itl_p50"),
        "no_sent": (_plain_run(tmp_path / "no_sent", requests=30, sent_s=None),
                    "NEW has no ttft_sent values", "ttft_sent_p50"),
    }  # fmt: skip
    metrics = ("--metric", "itl_p50", "--metric", "ttft_sent_p50", "--metric", "requests_per_s")
    for name, (new, needle, gated) in cases.items():
        args = (base, new, *metrics, "--format", output_format, "--gate", f"{gated}:+25%")
        code, out, err = run_cli(monkeypatch, capsys, *args)
        assert (code, err) == (1, ""), name  # the gated metric cannot be decided
        assert "Traceback" not in out and needle in out, (name, out)
        code, _, _ = run_cli(monkeypatch, capsys, *args, "--inconclusive", "pass")
        assert code == 0, name
        if output_format == "json" and name == "no_gaps":
            rows = {c["metric"]: c for c in json.loads(run_cli(monkeypatch, capsys, *args)[1])
                    ["comparisons"]}  # fmt: skip
            assert rows["itl_p50"]["status"] == "missing"
            assert rows["itl_p50"]["gate"]["verdict"] == "inconclusive"
            assert rows["ttft_sent_p50"]["status"] == "not significant"


def test_unusable_runs_are_one_line_and_exit_2(monkeypatch, capsys, tmp_path) -> None:
    base = _plain_run(tmp_path / "base", requests=30)
    failed = _plain_run(tmp_path / "failed", requests=0, failed=5)
    empty = _plain_run(tmp_path / "empty", requests=0)
    for args, needle in (
        ((failed, base), "BASE_RUN: "),
        ((base, empty), "NEW_RUN: "),
        ((base, tmp_path / "nowhere"), "NEW_RUN: no run directory"),
    ):
        code, out, err = run_cli(monkeypatch, capsys, *args, "--gate", "itl_p99:+10%")
        assert (code, out) == (2, "")
        assert len(err.strip().splitlines()) == 1 and f"error: {needle}" in err, err
    assert "no completed requests (5 failed)" in run_cli(monkeypatch, capsys, failed, base)[2]


def test_an_undecided_gate_names_the_run_size_that_decides_it(monkeypatch, capsys, tmp_path):
    # 40 requests of 31 gaps: the p99 rests on 12 gaps and its interval holds +5 %.
    small = [synth_run(tmp_path / f"s{i}", requests=40, seed=i) for i in (1, 2)]
    gate = ("--gate", "itl_p99:+5%", "--json")
    code, out, _ = run_cli(monkeypatch, capsys, *small, *gate)
    itl = next(c for c in json.loads(out)["comparisons"] if c["metric"] == "itl_p99")
    assert code == 1 and itl["gate"]["verdict"] == "inconclusive"
    assert itl["ci_low"] < 1.05 < itl["ci_high"]
    needed = itl["needed_requests"]
    assert needed > 40 and "holds the +5.0% limit" in itl["reason"]
    # Runs of that size (with a margin: it is an estimate) decide it.
    size = 2 * needed
    big = [synth_run(tmp_path / f"b{i}", requests=size, seed=10 + i) for i in (1, 2)]
    code, out, _ = run_cli(monkeypatch, capsys, *big, *gate)
    itl = next(c for c in json.loads(out)["comparisons"] if c["metric"] == "itl_p99")
    assert itl["gate"]["verdict"] == "pass" and code == 0, itl


def test_an_undecided_gate_counted_as_a_pass_stays_one_beside_a_failed_gate():
    """``--inconclusive pass``: the undecided gate is skipped in JUnit even when another
    gate fails the comparison (it was reported a failure whenever the comparison failed)."""
    from diagnose.gate import CompareResult, Gate, MetricResult
    from diagnose.metrics import metric_spec
    from diagnose.stats import Comparison
    from prefillscope.compare_view import to_junit

    def row(name: str, low: float, high: float) -> MetricResult:
        spec = metric_spec(name)
        ratio = (low + high) / 2
        comparison = Comparison(name, ratio, low, high, 0.01, True, 1.0, ratio, "bootstrap")
        return MetricResult(spec, comparison, Gate(spec, 0.10))

    failed, undecided = row("itl_p99", 1.3, 1.5), row("ttft_p50", 1.05, 1.2)
    assert (failed.gate_verdict, undecided.gate_verdict) == ("fail", "inconclusive")
    lenient = CompareResult(Path("a"), Path("b"), [failed, undecided], inconclusive="pass")
    strict = CompareResult(Path("a"), Path("b"), [failed, undecided])
    assert [lenient.counts_as_failure(r) for r in (failed, undecided)] == [True, False]
    assert [strict.counts_as_failure(r) for r in (failed, undecided)] == [True, True]
    assert not lenient.passed and not strict.passed
    lenient_doc, strict_doc = lenient.document(), strict.document()  # what the views read
    rows = lenient_doc.comparisons
    assert [lenient_doc.counts_as_failure(r) for r in rows] == [True, False]
    assert [strict_doc.counts_as_failure(r) for r in strict_doc.comparisons] == [True, True]
    assert not lenient_doc.passed and not strict_doc.passed
    suite = ET.fromstring(to_junit(lenient_doc)).find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    assert suite.find("testcase[@name='ttft_p50']/skipped") is not None
    assert ET.fromstring(to_junit(strict_doc)).find("testsuite").get("failures") == "2"
