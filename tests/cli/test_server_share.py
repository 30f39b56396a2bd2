"""The share of the server's counts this run sent, and the warning when other clients'
traffic was mixed in (issue 41 item 6: the server counted 354 TTFTs while the run sent
118, three benches sharing one server, and nothing was said)."""

from __future__ import annotations

import os
from pathlib import Path

from bench_support import bench_cli, bench_process

from perfmodel.config import EngineConfig
from prefillscope.report.content import mixed_traffic_warning, server_share
from runfmt.rundir import RunDir
from runfmt.summary import Summary
from simengine.embedded import EmbeddedServer

FAST = ("--gpu-telemetry", "off", "--metrics-interval", "0.2", "--workload", "system-prompt")
WIDE = {**os.environ, "COLUMNS": "200"}


def test_a_run_sharing_its_server_says_how_much_of_the_servers_count_it_sent(
    tmp_path: Path,
) -> None:
    with EmbeddedServer(EngineConfig(fixed_step_s=0.004)) as server:
        alone = tmp_path / "alone"
        done = bench_cli(
            "--endpoint", server.url, *FAST, "--num-requests", "20", "--rate", "10",
            "--out", str(alone), env=WIDE,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        other = bench_process(
            "--endpoint", server.url, *FAST, "--num-requests", "150", "--rate", "25",
            "--out", str(tmp_path / "other"),
        )  # fmt: skip
        try:
            shared = tmp_path / "shared"
            done = bench_cli(
                "--endpoint", server.url, *FAST, "--num-requests", "20", "--rate", "5",
                "--out", str(shared), env=WIDE,
            )  # fmt: skip
        finally:
            other.communicate(timeout=180)
    assert done.returncode == 0, done.stderr
    sent, counted = server_share(Summary.read(RunDir(shared)))
    assert sent == 20 and counted > 30  # the other bench's requests are in the server's rows
    warning = mixed_traffic_warning(Summary.read(RunDir(shared)))
    assert warning == (
        f"The server counted {counted:,} TTFTs over this run while it sent 20 "
        f"({20 / counted:.0%} of them): other clients' traffic is mixed into the server's "
        "figures."
    )
    assert "⚠ The server counted" in done.stdout and "this run's share" in done.stdout
    solo = Summary.read(RunDir(alone))
    assert server_share(solo)[0] == 20 and mixed_traffic_warning(solo) is None
