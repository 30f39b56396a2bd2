"""Coordinated omission: an open loop above capacity behind a client-side cap of 1.

Requests are due every 25 ms and each takes ~55 ms (11 fixed 5 ms engine steps), so
with ``--max-concurrency 1`` every request waits in the client behind the one before.
Measured from the actual send, TTFT stays at one step — the server was never slow;
measured from the intended send it grows with the backlog, which is what a user of
this schedule would see. The lag is reported and the run is flagged client-limited,
in the summary and on screen, with the reason naming the cap's queue.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bench_support import bench_cli, requests_table


@pytest.mark.timing
def test_intended_ttft_grows_while_sent_ttft_stays_flat(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = bench_cli(
        "--workload", "shared-prefix",
        "--set", "output_len=10", "--set", "suffix_len=32", "--set", "prefix_len=64",
        "--num-requests", "40", "--rate", "40", "--arrival", "constant",
        "--max-concurrency", "1",
        "--engine", "fixed_step_s=0.005",
        "--gpu-telemetry", "off", "--out", str(run),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    requests = requests_table(run).sort_values("intended_s")
    assert (requests["status"] == "ok").all() and len(requests) == 40
    intended = (requests["first_token_s"] - requests["intended_s"]).to_numpy()
    sent = (requests["first_token_s"] - requests["sent_s"]).to_numpy()
    lag = (requests["sent_s"] - requests["intended_s"]).to_numpy()

    # From the intended send: the backlog, growing ~30 ms per request (service ~55 ms
    # minus spacing 25 ms). From the actual send: flat, a step or two.
    index = np.arange(40)
    assert np.corrcoef(index, intended)[0, 1] > 0.99
    slope, slope_sent = np.polyfit(index, intended, 1)[0], np.polyfit(index, sent, 1)[0]
    assert 0.015 < slope < 0.25, slope
    assert abs(slope_sent) < 0.05 * slope and np.median(sent) < 0.03
    assert intended[0] < 0.05 < 0.8 < intended[-1]
    assert np.allclose(intended - sent, lag)

    summary = json.loads((run / "summary.json").read_text())
    assert summary["ttft_s"]["p99"] > 0.8 > 10 * summary["ttft_sent_s"]["p50"]
    client = summary["client"]
    assert client["dispatch_lag_p99_s"] > 0.8
    assert client["limited"] is True
    assert any("dispatch lag" in reason for reason in client["reasons"])
    # nearly all of the lag is the wait for the cap's one slot, and the reason says so
    assert client["concurrency_wait_s"]["p99"] > 0.8
    assert any("--max-concurrency slot" in reason for reason in client["reasons"])
    # On screen: the live lines and the final table say so.
    assert "CLIENT-LIMITED: dispatch lag p99" in done.stdout
    assert "The client limited this run" in done.stdout
