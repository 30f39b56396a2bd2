"""Exit statuses CI can use: a run whose requests all failed, or more of them than
``--max-error-rate``, exits 4 with the server's own message on one line.

The server is the embedded engine with a context shorter than the workload's prompts
(``--allow-overlong`` sends them anyway), so it refuses them itself with its own words
("this model's maximum context length is …"); the test request, a few tokens long, passes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_support import bench_cli, read_json

from runfmt.summary import Summary
from session.exit_status import exit_status, requests_failure, slo_breach

DOC_QA = ["--workload", "doc-qa", "--num-requests", "12", "--seed", "1", "--rate", "20"]
DOC_QA += ["--gpu-telemetry", "off", "--allow-overlong"]
#: doc-qa with seed 1: prompts of 2,582 to 7,549 tokens (p50 6,080), 192 output tokens.
FAST = "fixed_step_s=0.002"


def test_no_request_succeeded_exits_4_with_the_servers_message(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = bench_cli(*DOC_QA, "--engine", FAST, "--engine", "max_model_len=512", "--out", run)
    assert done.returncode == 4, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("prefillscope: requests failed: no request succeeded (12 of 12")
    assert "maximum context length is 512 tokens" in lines[0]
    summary = read_json(run, "summary.json")
    assert summary["requests"]["completed"] == 0 and read_json(run, "run.json")["status"] == (
        "complete"
    )
    top = summary["error_messages"][0]
    assert "maximum context length is 512 tokens" in top["message"] and top["count"] >= 1
    assert sum(m["count"] for m in summary["error_messages"]) <= 12
    # the end-of-run screen shows the messages, not only their classes
    assert "top error messages" in done.stdout
    assert "maximum context length is 512" in " ".join(done.stdout.split())


def test_a_failed_share_above_max_error_rate_exits_4(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = bench_cli(
        *DOC_QA, "--engine", FAST, "--engine", "max_model_len=6300",
        "--max-error-rate", "0.2", "--out", run,
    )  # fmt: skip
    counts = read_json(run, "summary.json")["requests"]
    share = counts["failed"] / counts["total"]
    assert 0.2 < share < 1, counts  # some fit in 6,300 tokens, more than a fifth do not
    assert done.returncode == 4, done.stderr
    line = done.stderr.strip()
    assert f"{counts['failed']} of 12 requests failed" in line
    assert "more than --max-error-rate 0.2" in line and "maximum context length is 6300" in line


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "inf"])
def test_max_error_rate_outside_0_1_is_bad_input(tmp_path: Path, value: str) -> None:
    done = bench_cli(*DOC_QA, "--max-error-rate", value, "--out", tmp_path / "run")
    assert done.returncode == 2
    assert done.stderr.startswith("prefillscope: error: --max-error-rate: ")
    assert done.stderr.count("\n") == 1 and not (tmp_path / "run").exists()


def _document(total: int, ok: int) -> dict:
    message = {"message": "HTTP 503: overloaded", "kind": "http_5xx", "count": total - ok}
    return {"requests": {"total": total, "completed": ok}, "error_messages": [message]}


def _summary(total: int, ok: int) -> Summary:
    """The summary a file holding ``_document(total, ok)`` reads as."""
    return Summary.from_json(_document(total, ok))


def test_the_threshold_is_a_larger_share_not_an_equal_one() -> None:
    assert requests_failure(_summary(10, 8), 0.2) is None  # 20 % failed: not more than 0.2
    assert "3 of 10 requests failed (30.0%)" in str(requests_failure(_summary(10, 7), 0.2))
    assert requests_failure(_summary(10, 7), None) is None  # no threshold: some succeeded
    assert "no request succeeded" in str(requests_failure(_summary(10, 0), None))
    assert "10× http_5xx: HTTP 503: overloaded" in str(requests_failure(_summary(10, 0), 1.0))
    assert requests_failure(_summary(0, 0), 0.0) is None  # nothing measured: nothing failed
    assert json.dumps(_summary(1, 1).to_json())  # a plain JSON document, as summary.json holds


SMALL = ["--workload", "shared-prefix", "--num-requests", "6", "--rate", "20", "--seed", "3"]
SMALL += ["--gpu-telemetry", "off", "--engine", FAST]


def test_a_goodput_share_below_min_goodput_exits_5_and_json_names_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # TTFT within 1 µs: no request can meet it, though every one is answered
    done = bench_cli(*SMALL, "--slo", "ttft=0.001", "--min-goodput", "0.5", "--json", "--out", run)
    assert done.returncode == 5, done.stderr
    document = json.loads(done.stdout)
    assert document["run_dir"] == str(run) and document["status"] == "complete"
    assert document["requests"]["completed"] == 6 and document["goodput"]["share"] == 0
    assert document["ttft_s"] == read_json(run, "summary.json")["ttft_s"]
    lines = [line for line in done.stderr.splitlines() if line.startswith("prefillscope:")]
    assert lines == [
        "prefillscope: SLO breached: 0 of 6 requests (0.0%) met the SLO ttft=0.001ms, "
        f"below --min-goodput 0.5; {run}"
    ], done.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--slo", "ttft=500", "--min-goodput", "1.5"], "1.5 is not a share in [0, 1]"),
        (["--slo", "ttft=500", "--min-goodput", "nan"], "nan is not a share in [0, 1]"),
        (["--min-goodput", "0.9"], "needs an SLO to meet"),
    ],
)
def test_min_goodput_bad_input_is_one_line(tmp_path: Path, extra: list[str], message: str) -> None:
    done = bench_cli(*SMALL, *extra, "--out", tmp_path / "run")
    assert done.returncode == 2
    assert done.stderr.startswith("prefillscope: error: --min-goodput: ") and message in done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "run").exists()


def _goodput_summary(total: int, ok: int, good: int) -> Summary:
    goodput = {"slo": {"ttft_s": 0.5}, "requests": good, "share": good / total}
    return Summary.from_json(_document(total, ok) | {"goodput": goodput})


def test_the_slo_breach_is_a_smaller_share_and_exit_4_wins() -> None:
    assert slo_breach(_goodput_summary(10, 10, 9), 0.9) is None  # 90 % met: not below 0.9
    line = str(slo_breach(_goodput_summary(10, 10, 8), 0.9))
    assert line == "8 of 10 requests (80.0%) met the SLO ttft=500ms, below --min-goodput 0.9"
    assert exit_status("complete", _goodput_summary(10, 10, 8), None, 0.9) == 5
    assert exit_status("complete", _goodput_summary(10, 10, 8), None, None) == 0
    assert exit_status("complete", _goodput_summary(10, 0, 0), None, 0.9) == 4  # none answered
    assert exit_status("interrupted", _goodput_summary(10, 10, 0), None, 0.9) == 3
