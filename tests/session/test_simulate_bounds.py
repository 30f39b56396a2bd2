"""``prefillscope simulate`` bounded like ``serve``: every KV-link flag refused past the one
bound the link defines, a link too fast for the clock to resolve still finishing, and a
stop signal keeping the configurations already simulated — all through the real CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "simulate"]
#: Six short prompts a day apart: each transfer is far below the clock's resolution there.
SPARSE = ["--workload", "random", "--set", "num_requests=6", "--set", "input_len=4"]
SPARSE += ["--rate", "0.00001", "--disaggregate", "1:1", "--no-monolithic", "--no-break-even"]


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Before the bounds, ``--kv-link-gbps 1e20`` spun forever: the timeout fails the test."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--kv-link-gbps", "1e20", "above the cap of 1,000,000,000"),
        ("--kv-link-gbps", "inf", "inf is not allowed"),
        ("--kv-link-latency-us", "1e12", "above the cap of 3,600,000,000: an hour"),
        ("--kv-transfer-overhead-us", "-1", "-1 is too small"),
        ("--kv-link-efficiency", "nan", "NaN is not allowed"),
        ("--gpus", "1000000000000", "above the cap of 1,024"),  # it simulated 5·10¹¹ engines
    ],
)
def test_an_absurd_link_or_grid_is_refused_in_one_line_as_serve_refuses_it(
    flag: str, value: str, says: str
) -> None:
    done = _cli(*SPARSE, flag, value)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"prefillscope: error: {flag}: "), done.stderr
    assert says in done.stderr and done.stderr.count("\n") == 1 and done.stdout == ""


def test_a_link_faster_than_the_clock_resolves_finishes_in_under_a_second() -> None:
    """At 10⁹ Gb/s (in bounds) a 4-token prompt's KV crosses in ~4·10⁻¹² s, below the
    resolution of a clock a day in: the link's next event was 'now' and never came."""
    done = _cli(*SPARSE, "--kv-link-gbps", "1e9", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    (row,) = result["configurations"]
    assert result["status"] == "complete" and row["completed"] == row["requests"] == 6
    assert result["speed"]["grid_wall_s"] < 1.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_keeps_and_prints_the_configurations_done(
    tmp_path: Path, sig: signal.Signals
) -> None:
    page = tmp_path / "grid.html"
    grid_flags = ["--workload", "shared-prefix", "--num-requests", "300", "--no-break-even"]
    grid_flags += ["--chunks", "128,256,512,1024,2048,4096", "--html", str(page), "--json"]
    grid = subprocess.Popen(
        [*CLI, *grid_flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert grid.stderr is not None
    first = grid.stderr.readline()  # the first configuration done
    assert first.startswith("prefillscope simulate: 1/6 mono ×1, chunk 128"), first
    grid.send_signal(sig)
    stdout, rest = grid.communicate(timeout=120)
    assert grid.returncode == 128 + sig, rest
    progress = [first, *(line for line in rest.splitlines() if "simulate: " in line)]
    result = json.loads(stdout)
    done = len(result["configurations"])
    assert 1 <= done < 6 and done == len(progress)
    name = "Ctrl-C" if sig == signal.SIGINT else sig.name
    assert result["status"] == "interrupted" and result["reason"] == f"cancelled ({name})"
    assert rest.splitlines()[-1] == (
        f"prefillscope: simulate stopped ({name}) after {done} of 6 configurations; those are shown"
    )
    assert [row["chunk"] for row in result["configurations"]] == [128, 256, 512, 1024, 2048][:done]
    assert f"Incomplete: cancelled ({name}) after {done} of 6" in page.read_text()
