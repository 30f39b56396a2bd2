"""A run that does not finish: the server killed under it, or a stop signal (Ctrl-C,
SIGTERM, SIGHUP).

Both leave a run directory holding every request that finished (complete, with all its
tokens), the ones in flight recorded with their error class, ``run.json`` saying
``interrupted`` and why, the tables compacted and a summary of what was measured — and
the command exits non-zero with one line on stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from bench_support import bench_process, read_json, requests_table, wait_for_rows

from runtime.lifetime import dying_with_us

SERVE = [sys.executable, "-c", "from prefillscope.cli import main; main()", "serve"]
WORKLOAD = ("--workload", "shared-prefix", "--set", "output_len=40", "--num-requests", "400")


class Served(NamedTuple):
    process: subprocess.Popen[str]
    url: str


@pytest.fixture
def server() -> Iterator[Served]:
    """``prefillscope serve`` in its own process (5 ms steps), killed by the test."""
    proc = subprocess.Popen(
        dying_with_us([*SERVE, "--port", "0", "--json", "--fixed-step-ms", "5"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    yield Served(proc, json.loads(proc.stdout.readline())["url"])
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _check_interrupted(run: Path, stderr: str, why: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("prefillscope: run interrupted:") and why in lines[0]
    assert str(run) in lines[0]
    info = read_json(run, "run.json")
    assert info["status"] == "interrupted" and why in info["reason"]
    assert (run / "requests.parquet").exists() and (run / "summary.json").exists()
    requests = requests_table(run)
    ok = requests[requests["status"] == "ok"]
    assert len(ok) >= 8 and (ok["output_tokens"] == 40).all()
    failed = requests[requests["status"] != "ok"]
    assert len(failed) >= 1 and failed["error_kind"].notna().all()
    assert failed["end_s"].notna().all()
    # every released request has its row; sent are those whose bytes left (a request
    # still held for its send time, or refused a connection, was not)
    counts = info["result"]["requests"]
    assert len(requests) == counts["released"] == counts["finished"]
    assert requests["sent_s"].notna().sum() == counts["sent"]
    summary = read_json(run, "summary.json")
    assert summary["requests"]["completed"] == len(ok)


def _interrupted(run: Path, stop: Callable[[subprocess.Popen[str]], None], *args: str):
    """Start a long bench (in a process group of its own, as a terminal's foreground job
    is), ``stop`` it once ten requests finished; (exit status, stderr)."""
    bench = bench_process(
        *WORKLOAD, "--rate", "25", "--gpu-telemetry", "off", "--out", str(run), *args,
        process_group=0,
    )  # fmt: skip
    wait_for_rows(run / "requests.jsonl", 10)
    stop(bench)
    _, stderr = bench.communicate(timeout=60)
    return bench.returncode, stderr


@pytest.mark.timing
def test_server_killed_mid_run(tmp_path: Path, server: Served) -> None:
    run = tmp_path / "run"
    status, stderr = _interrupted(
        run,
        lambda _: server.process.send_signal(signal.SIGKILL),
        *("--endpoint", server.url, "--vocab-size", "32000"),
    )
    assert status == 3
    _check_interrupted(run, stderr, "stopped answering")
    failed = requests_table(run).query("status != 'ok'")
    assert set(failed["error_kind"]) <= {"connect", "dropped", "stream_truncated", "cancelled"}
    assert {"connect", "dropped", "stream_truncated"} & set(failed["error_kind"])


def _to_group(sig: signal.Signals) -> Callable[[subprocess.Popen[str]], None]:
    """What a terminal does: the signal to the whole foreground process group (the bench
    and its engine and probe children)."""
    return lambda bench: os.killpg(bench.pid, sig)


def _to_process(sig: signal.Signals) -> Callable[[subprocess.Popen[str]], None]:
    """What a CI runner or ``kill`` does: the signal to the command alone."""
    return lambda bench: bench.send_signal(sig)


@pytest.mark.parametrize(
    ("sig", "deliver", "status", "name"),
    [
        (signal.SIGINT, _to_group, 130, "Ctrl-C"),
        (signal.SIGTERM, _to_process, 143, "SIGTERM"),
        (signal.SIGTERM, _to_group, 143, "SIGTERM"),
        (signal.SIGHUP, _to_group, 129, "SIGHUP"),
    ],
)
def test_stop_signal(tmp_path: Path, sig: signal.Signals, deliver, status: int, name: str) -> None:
    """Ctrl-C, a CI's SIGTERM and a closed terminal's SIGHUP all end a run the same way."""
    run = tmp_path / "run"
    code, stderr = _interrupted(run, deliver(sig), "--engine", "fixed_step_s=0.005")
    assert code == status
    _check_interrupted(run, stderr, name)
    failed = requests_table(run).query("status != 'ok'")
    assert set(failed["error_kind"]) == {"cancelled"}
    # the engine and probe children leave the ending to the bench: none was killed by it
    probes = read_json(run, "run.json")["probes"]
    assert "killed by" not in json.dumps(probes), probes
