"""Coordinated omission: an open loop above capacity behind a client-side cap of 1.

Requests are due every 25 ms and each takes ~55 ms (11 fixed 5 ms engine steps), so
with ``--max-concurrency 1`` every request waits in the client behind the one before.
Measured from the actual send, TTFT stays at one step — the server was never slow;
measured from the intended send it grows with the backlog, which is what a user of
this schedule would see. The lag and the slot wait are reported, but the cap is the
user's choice: the run is not flagged client-limited, and the screen leads with TTFT and
E2E from the actual send (what ``vllm bench serve`` reports under a cap), the
intended-send rows after them.
"""

from __future__ import annotations

import json
import re
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
    # nearly all of the lag is the wait for the cap's one slot: the cap's queue, not a
    # client too slow for its schedule
    assert client["concurrency_wait_s"]["p99"] > 0.8
    # a busy machine may still make the client late past its slot (that is a limit, and
    # named as one), but the slot's wait itself is never counted as the client's lag
    wait_ms = client["concurrency_wait_s"]["p99"] * 1e3
    for reason in client["reasons"]:
        lag = re.match(r"dispatch lag.*? ([\d.]+) ms > ", reason)
        assert lag is None or float(lag.group(1)) < wait_ms / 2, (reason, wait_ms)
        assert lag is None or "past the --max-concurrency slot wait" in reason
    # the table leads with the send-timed TTFT, labelled as vLLM's, the intended one next
    rows = [line.split()[:3] for line in done.stdout.splitlines() if line.startswith(" TTFT")]
    assert rows[0][1:] in (["(from", "actual"], ["(sent,", "as"]), rows
    assert rows[1][1:] in (["(from", "intended"], ["(intended)", rows[1][2]]), rows
