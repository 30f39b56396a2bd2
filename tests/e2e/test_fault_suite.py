"""Fault injection through the real ``prefillscope bench --endpoint`` command: a
misbehaving server (``tests/support/fault_server.py``, its own process) answers every other
request with one fault, and each test checks the exit status, that every request sent
has its row, and the error class and message the failed rows carry.

``pytest -s`` prints the fault matrix (fault → exit, rows kept, classes).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import fault_server
import pytest
from bench_support import bench_cli, bench_process, wait_for_rows
from fault_server import MESSAGES, MODEL
from repo_paths import SUPPORT

from runfmt.tables import RunTables
from session.exit_status import EXIT_INTERRUPTED, EXIT_REQUESTS_FAILED

SERVER = SUPPORT / "fault_server.py"
REQUESTS = 8


def start_server(fault: str, keepalive: float = 75.0) -> tuple[subprocess.Popen[str], str]:
    return fault_server.start(fault, keepalive)


def bench_args(url: str, out: Path, *extra: str) -> list[str]:
    return [
        "--endpoint", url, "--backend", "vllm", "--model", MODEL, "--vocab-size", "32000",
        "--no-server-metrics", "--gpu-telemetry", "off", "--cache-protocol", "warm",
        "--workload", "shared-prefix", "--set", "groups=1", "--set", "prefix_len=16",
        "--set", "suffix_len=8", "--set", "output_len=4", "--out", str(out), *extra,
    ]  # fmt: skip


def bench_against(fault: str, out: Path, *extra: str, keepalive: float = 75.0):
    """``prefillscope bench`` (``bench_args`` + ``extra``) against a fresh fault server,
    which is stopped however the run ends; the finished command."""
    proc, url = start_server(fault, keepalive)
    try:
        return bench_cli(*bench_args(url, out, *extra))
    finally:
        proc.kill()
        proc.wait()


def rows(out: Path):
    return RunTables(out).requests


def matrix_line(fault: str, code: int, requests) -> str:
    kinds = Counter(k for k in requests["error_kind"].tolist() if isinstance(k, str))
    return f"FAULT {fault}: exit {code}, rows kept {len(requests)}, classes {dict(kinds)}"


#: fault → (extra bench flags, error class of the faulty half, text its message holds)
FAULTS = {
    "error-event": ((), "stream_error_event", MESSAGES["error-event"]),
    "malformed-event": ((), "stream_malformed", "event is not a JSON object"),
    "truncated-event": ((), "stream_truncated", "connection closed mid-event"),
    "no-headers": ((), "dropped", "Server disconnected"),
    "json-not-sse": ((), "stream_malformed", "expected a text/event-stream answer"),
    "stall-headers": (("--timeout", "2"), "timeout", "no response within 2 s"),
    "stall": (("--timeout", "2"), "timeout", "stream unfinished after 2 s"),
    "oversize": (("--max-event-bytes", "1000000"), "stream_oversize", "more than 1,000,000"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_fault_on_every_other_request_is_classified_with_its_message(
    fault: str, tmp_path: Path
) -> None:
    extra, kind, message = FAULTS[fault]
    out = tmp_path / "run"
    done = bench_against(fault, out, "--num-requests", str(REQUESTS), "--concurrency", "2", *extra)
    requests = rows(out)
    print(matrix_line(fault, done.returncode, requests))
    assert done.returncode == 0, done.stderr  # half of the requests succeeded
    assert "Traceback" not in done.stderr
    assert len(requests) == REQUESTS  # every request sent has its row
    failed = requests[requests["status"] == "error"]
    assert len(failed) == REQUESTS // 2
    assert set(failed["error_kind"]) == {kind}
    assert all(message in text for text in failed["error_message"]), failed["error_message"]


def test_429_and_5xx_keep_their_status_and_message(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = bench_against("http-429-5xx", out, "--num-requests", str(REQUESTS), "--concurrency", "2")
    requests = rows(out)
    print(matrix_line("http-429-5xx", done.returncode, requests))
    assert done.returncode == 0 and len(requests) == REQUESTS
    for kind, status in (("http_429", 429), ("http_5xx", 503)):
        hit = requests[requests["error_kind"] == kind]
        assert len(hit) == REQUESTS // 4
        assert set(hit["http_status"]) == {status}
        assert set(hit["error_message"]) == {f"HTTP {status}: {MESSAGES[str(status)]}"}


def test_a_server_that_fails_every_request_is_refused_before_the_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = bench_against("all-5xx", out, "--num-requests", "6", "--concurrency", "2")
    print(f"FAULT all-5xx: exit {done.returncode}, rows kept 0 (refused at the test request)")
    assert done.returncode == 2 and not out.exists()
    assert MESSAGES["500"] in done.stderr and "Traceback" not in done.stderr


def test_a_run_where_every_request_failed_exits_4_with_the_servers_message(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    done = bench_against("all-5xx-after-first", out, "--num-requests", "6", "--concurrency", "2")
    requests = rows(out)
    print(matrix_line("all-5xx-after-first", done.returncode, requests))
    assert done.returncode == EXIT_REQUESTS_FAILED and len(requests) == 6
    assert set(requests["error_kind"]) == {"http_5xx"}
    assert MESSAGES["500"] in done.stderr  # the server's own words, not only a class


def test_more_failures_than_max_error_rate_fail_the_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = bench_against(
        "http-429-5xx",
        out,
        "--num-requests",
        str(REQUESTS),
        "--concurrency",
        "2",
        "--max-error-rate",
        "0.25",
    )
    requests = rows(out)
    print(matrix_line("http-429-5xx --max-error-rate 0.25", done.returncode, requests))
    assert done.returncode == EXIT_REQUESTS_FAILED and len(requests) == REQUESTS
    assert MESSAGES["429"] in done.stderr or MESSAGES["503"] in done.stderr


def test_slow_byte_by_byte_streams_are_read_whole(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = bench_against("slow-bytes", out, "--num-requests", "4", "--concurrency", "2")
    requests = rows(out)
    print(matrix_line("slow-bytes", done.returncode, requests))
    assert done.returncode == 0 and len(requests) == 4
    assert (requests["status"] == "ok").all() and (requests["output_tokens"] == 4).all()
    chunks = RunTables(out).chunks
    assert chunks.groupby("request_id")["n_tokens"].sum().tolist() == [4] * 4


def test_a_short_keep_alive_loses_no_request(tmp_path: Path) -> None:
    """Open loop at 2 req/s against a 0.5 s keep-alive: a pooled connection the server
    closes between taking it and sending on it is retried, not a connect failure."""
    out = tmp_path / "run"
    done = bench_against(
        "none", out, "--num-requests", "40", "--rate", "2", "--arrival", "constant", keepalive=0.5
    )
    requests = rows(out)
    print(matrix_line("keepalive-0.5s", done.returncode, requests),
          f"retried {int(requests['retried'].sum())}")  # fmt: skip
    assert done.returncode == 0 and len(requests) == 40
    assert (requests["status"] == "ok").all(), requests["error_message"].dropna().tolist()


def test_a_server_killed_mid_run_keeps_every_row(tmp_path: Path) -> None:
    proc, url = start_server("none")
    out = tmp_path / "run"
    bench = bench_process(*bench_args(url, out, "--num-requests", "30", "--rate", "4",
                                      "--arrival", "constant"))  # fmt: skip
    try:
        wait_for_rows(out / "requests.jsonl", 6)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        _, err = bench.communicate(timeout=120)
    finally:
        proc.kill()
        bench.kill()
    requests = rows(out)
    print(matrix_line("server SIGKILL", bench.returncode, requests))
    assert "Traceback" not in err
    ok = requests[requests["status"] == "ok"]
    assert len(ok) >= 6  # what finished before the kill is all there
    failed = requests[requests["status"] == "error"]
    assert set(failed["error_kind"]) <= {"connect", "dropped", "stream_truncated", "cancelled"}
    assert len(failed) >= 1 and bench.returncode == EXIT_INTERRUPTED, err
    assert f"{len(ok)} completed" in err or str(len(ok)) in err
