"""``prefillscope serve --disaggregate`` as a user runs it, measured by ``bench``."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from bench_support import bench_cli, read_json, requests_table

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "serve"]


def _series(text: str, name: str) -> dict[str, float]:
    """Every sample of ``name`` on a /metrics page, keyed by its label text."""
    out = {}
    for m in re.finditer(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", text, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def test_serve_disaggregated_bench_and_metrics_per_role(tmp_path: Path) -> None:
    flags = [
        "--port", "0", "--json", "--disaggregate", "2:1", "--kv-link-gbps", "100",
        "--kv-link-latency-us", "200", "--kv-transfer", "overlap",
        "--max-num-batched-tokens", "512",
    ]  # fmt: skip
    proc = subprocess.Popen(
        [*CLI, *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        info = json.loads(proc.stdout.readline())
        assert info["disaggregate"]["ratio"] == "2:1"
        assert info["disaggregate"]["transfer"] == "overlap"
        done = bench_cli(
            "--workload", "few-shot", "--num-requests", "10", "--rate", "20", "--seed", "3",
            "--endpoint", info["url"], "--gpu-telemetry", "off", "--out", str(tmp_path / "run"),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        requests = requests_table(tmp_path / "run")
        assert len(requests) == 10 and (requests["status"] == "ok").all()
        summary = read_json(tmp_path / "run", "summary.json")
        assert summary["ttft_s"]["count"] == 10
        with httpx.Client(base_url=info["url"], timeout=10) as client:
            text = client.get("/metrics").text
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    running = _series(text, "vllm:prompt_tokens_total")
    roles = {re.search(r'role="(\w+)"', k).group(1) for k in running}
    assert roles == {"prefill", "decode"} and len(running) == 3  # 2 prefill + 1 decode
    # server-side truth (bench also sends a one-request smoke test before the clock starts)
    served = sum(_series(text, "vllm:time_to_first_token_seconds_count").values())
    assert served >= 10 and 'role="decode"' in next(
        iter(_series(text, "vllm:e2e_request_latency_seconds_count"))
    )
    prompt_tokens = sum(v for k, v in running.items() if 'role="prefill"' in k)
    assert prompt_tokens >= requests["prompt_tokens"].sum()
    queried = sum(_series(text, "vllm:external_prefix_cache_queries_total").values())
    assert queried == prompt_tokens  # every prompt prefilled on P was received on D
    sent = sum(_series(text, "prefillscope_engine_kv_transfer_bytes_total").values())
    hits = sum(_series(text, "vllm:external_prefix_cache_hits_total").values())
    assert sent == hits * 131_072 and sent > 0  # llama-3.1-8b: 131,072 B per token
    waits = _series(text, "prefillscope_engine_kv_transfer_seconds_count")
    assert sum(waits.values()) == served
    wait_sum = sum(_series(text, "prefillscope_engine_kv_transfer_seconds_sum").values())
    assert wait_sum >= served * 200e-6  # every request waited at least the link's latency
    assert sum(_series(text, "vllm:nixl_xfer_time_seconds_count").values()) >= served


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--disaggregate", "2"], "--disaggregate"),
        (["--disaggregate", "1:1", "--kv-link-gbps", "0"], "--kv-link-gbps"),
        (["--disaggregate", "1:1", "--kv-transfer", "later"], "--kv-transfer"),
        (["--disaggregate", "1:1", "--kv-link-latency-us", "-5"], "--kv-link-latency-us"),
    ],
)
def test_bad_disaggregation_flags_are_one_line_errors(flags: list[str], field: str) -> None:
    done = subprocess.run([*CLI, "--port", "0", *flags], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and field in done.stderr
