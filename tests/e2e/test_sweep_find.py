"""``prefillscope sweep --find`` against the embedded engine (issue 41 item 8): the highest
rate meeting every bound, by bisection, each probe judged by its intervals; the time
estimate said before any probe; one line and exit 2 for a search that cannot decide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()"]
#: About 4 sequences × 1 / (9 steps × 20 ms) ≈ 22 requests/s at most: TTFT explodes above.
ENGINE = ("--engine", "fixed_step_s=0.02", "--engine", "max_num_seqs=4")
WORKLOAD = ("--workload", "system-prompt", "--num-requests", "30", "--set", "output_len=8")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600)


def test_the_search_brackets_the_highest_rate_meeting_the_bound(tmp_path: Path) -> None:
    out = tmp_path / "find"
    done = cli(
        "sweep", *WORKLOAD, *ENGINE, "--rates", "4,16,64", "--find", "ttft_p50<150ms",
        "--resolution", "0.25", "--gpu-telemetry", "off", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("prefillscope: SLA search:") and "about" in first  # before probes
    doc = json.loads((out / "sweep.json").read_text())
    search = doc["search"]
    assert search["state"] == "done" and search["bounds"][0]["limit"] == 0.15
    probes = search["probes"]
    verdicts = {p["value"]: p["verdict"] for p in probes}
    answer, (low, high) = search["answer"], search["bracket"]
    assert answer == low and verdicts[answer] == "meets"
    assert high is not None and verdicts[high] in ("misses", "inconclusive")
    assert high <= answer * 1.25 or search["ended"] != "resolution"
    assert not any(v == "meets" and v_ > answer for v_, v in verdicts.items())
    for probe in probes:  # each verdict rests on its interval
        (check,) = probe["checks"]
        assert check["low"] is None or check["low"] <= check["value"] <= check["high"]
        if probe["verdict"] == "meets":
            assert check["high"] < 0.15
        if probe["verdict"] == "misses":
            assert check["low"] > 0.15
        assert (out / probe["run_dir"] / "run.json").is_file()
    assert len({p["value"] for p in probes}) >= 4  # the grid, then at least one bisection
    assert f"highest rate meeting ttft_p50<150ms: {answer:g} req/s" in done.stdout.replace(
        "\n", " "
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--find", "ttft_p99<1s"), "needs 1,000 requests per probe"),
        (("--find", "ttft_p50>1s"), "bounded below"),
        (("--find", "ttft_p50<1s", "--rates", "1,inf"), "finite rates"),
    ],
)
def test_a_search_that_cannot_decide_is_one_line_and_exit_2(
    tmp_path: Path, extra: tuple[str, ...], message: str
) -> None:
    rates = () if "--rates" in extra else ("--rates", "1,2")
    done = cli("sweep", *WORKLOAD, *rates, *extra, "--out", str(tmp_path / "f"))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "f").exists()
