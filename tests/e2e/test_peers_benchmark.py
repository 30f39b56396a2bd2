"""``benchmarks/peers.py``, the clients side by side against the SSE mock.

At a tiny size (4 streams, 8 requests of 5 tokens; the bare reader and ``prefillscope
bench --workers 1``, and one open-loop point at 20 requests/s) the whole benchmark runs
as its command and writes its table: a row per client and per open-loop rate, with
finite figures. And the pairing of each request's TTFT with the mock's
truth for it is exact on a record made by hand. No timing bounds: the machine is shared.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from repo_paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))  # peers imports its siblings by name

import peers
from peers_clients import Outcome


@pytest.mark.slow  # a mock, four bench commands and two bare readers: ~10 s
def test_a_tiny_run_writes_a_row_per_client(tmp_path: Path) -> None:
    out, figures = tmp_path / "peers.md", tmp_path / "peers.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "peers.py"),
         "--streams", "4", "--requests", "8", "--max-tokens", "5", "--clients", "bare,w1",
         "--startup-runs", "1", "--fixed-runs", "1", "--open-rates", "20",
         "--out", str(out), "--json", str(figures)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    assert "load average before" in text and "Fixed cost" in text
    for label in (
        "bare reader (aiohttp + uvloop) | 4 | 8 |",
        "prefillscope bench --workers 1 | 4 | 8 |",
    ):
        assert f"| {label}" in text, text
    result = json.loads(figures.read_text())
    for name in ("bare", "w1"):
        client = result["clients"][name]
        assert "not_run" not in client, client
        row = client["points"]["4"]
        assert row["tokens"] == 8 * 5
        assert row["ttft_paired"] >= 1
        for key in ("cpu_us_per_token", "ttft_err_mean_ms", "ttft_err_p99_ms", "itl_err_p99_ms"):
            assert math.isfinite(row[key]), (name, key, row[key])
        assert math.isfinite(client["startup_cpu_s"]) and client["startup_cpu_s"] > 0
    assert result["fixed"]["bare16"] > 0 and sum(result["fixed"]["bench16"]) > 0
    opened = result["open_loop"]["20"]  # 8 requests at 20/s: streams open side by side
    assert opened["ttft_paired"] >= 1 and opened["streams_mean"] > 0
    assert math.isfinite(opened["ttft_err_mean_ms"]), opened
    assert "| 20 | 8 |" in text, text


def test_each_request_is_paired_with_the_stream_the_mock_wrote() -> None:
    """Two requests whose first tokens went out in tick 1, sent in one order and read
    whole by the mock in the same order; a request of the client's own (a smoke test) in
    tick 0 that the table does not hold is left out. Error = client TTFT − mock TTFT."""
    starts = np.arange(4) * 0.02
    ticks = np.column_stack([starts, starts, starts + 0.001, np.full(4, 2.0)])
    firsts = np.array([[0.001, 0.0005], [0.005, 0.0201], [0.006, 0.0202]])
    chunks = pd.DataFrame(
        {
            "request_id": ["a", "a", "b", "b"],
            "t_s": [0.0210, 0.0410, 0.0215, 0.0415],
            "n_tokens": [1, 1, 1, 1],
        }
    )
    outcome = Outcome(1.0, 4, pd.Series({"a": 0.004, "b": 0.0045}), chunks)
    errors = peers.ttft_errors(outcome, ticks[:, 1], firsts)
    expected = [(0.0210 - 0.004) - (0.0201 - 0.005), (0.0215 - 0.0045) - (0.0202 - 0.006)]
    np.testing.assert_allclose(np.sort(errors), np.sort(expected))
