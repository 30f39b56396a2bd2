"""A bench run with long prompts beside decode streams carries its stall events: in
``summary.json`` (``stalls``), on the screen the run ends with, in the HTML report and in
``diagnose``'s H1 — one definition (``probes.stall_events``), checked here against the
run's own chunks by an independent count."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from bench_support import bench_cli, read_json, requests_table

from runfmt.tables import RunTables


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("stalls") / "run"
    done = bench_cli(
        "--workload", "interference", "--num-requests", "4", "--rate", "2",
        "--concurrency", "4", "--set", "stream_requests=1", "--set", "stream_output_len=400",
        "--set", "long_prompt_len=8192", "--engine", "max_num_batched_tokens=8192",
        "--gpu-telemetry", "off", "--out", str(out), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out, done.stdout


def worst_gaps_by_hand(path: Path) -> list[float]:
    """Each long prompt's worst decode gap overlapping its send → first token, counted
    from the token-bearing chunks of the measured requests with a plain loop (a chunk of n
    tokens after a gap g: n per-token gaps of g / n, each ending at the chunk)."""
    requests = requests_table(path)
    requests = requests[~requests["warmup"].fillna(False).astype(bool)]
    chunks = RunTables(path).chunks
    chunks = chunks[chunks["n_tokens"] > 0]
    decode = requests[requests["kind"] == "decode"]["id"].tolist()
    spans = []  # (start, end) of each per-token decode gap
    for rid in decode:
        mine = chunks[chunks["request_id"] == rid].sort_values("t_s")
        arrivals = list(zip(mine["t_s"], mine["n_tokens"], strict=True))
        for (before, _), (t, n) in itertools.pairwise(arrivals):
            spans += [(t - (t - before) / n, t)] * int(n)
    worst = []
    for _, row in requests[requests["kind"] == "long-prompt"].iterrows():
        beside = [b - a for a, b in spans if b > row["sent_s"] and a < row["first_token_s"]]
        if beside:
            worst.append(max(beside))
    return worst


def test_the_summary_carries_each_long_prefills_stall(run):
    path, _ = run
    stalls = read_json(path, "summary.json")["stalls"]
    by_hand = worst_gaps_by_hand(path)
    assert stalls["kind"] == "long-prompt" and stalls["events"] == len(by_hand) >= 2
    assert stalls["events"] + stalls["alone"] == 4
    assert stalls["stall_worst_mean_s"] == pytest.approx(np.mean(by_hand), rel=1e-6)
    assert stalls["stall_worst_max_s"] == pytest.approx(max(by_hand), rel=1e-6)
    low, high = stalls["stall_worst_interval_s"]
    assert low <= stalls["stall_worst_mean_s"] <= high
    # an 8192-token chunk beside the decodes is many decode steps long
    assert stalls["stall_worst_mean_s"] > 4 * stalls["normal_gap_s"]
    assert 0 < stalls["stall_gaps"] <= stalls["gaps"]
    assert stalls["stall_gap_share"] == pytest.approx(stalls["stall_gaps"] / stalls["gaps"])
    assert stalls["seen_by_itl_p99"] == (stalls["stall_gap_share"] >= 0.01)


def test_the_screen_the_report_and_h1_show_them(run, tmp_path):
    path, screen = run
    assert "worst decode gap per prefill" in screen and "decode time lost per prefill" in screen
    assert "long-prompt prefills beside decode streams" in screen
    page = tmp_path / "report.html"
    cli = [sys.executable, "-m", "prefillscope"]
    done = subprocess.run([*cli, "report", str(path), "--html", str(page)],
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Stalls: each long prefill beside the decode streams" in page.read_text()
    done = subprocess.run([*cli, "diagnose", str(path), "--json"],
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    h1 = next(h for h in json.loads(done.stdout)["hypotheses"] if h["id"] == "H1")
    evidence = {e["name"]: e for e in h1["evidence"]}
    summary = read_json(path, "summary.json")["stalls"]
    stretch = evidence["worst decode gap per prefill / normal gap"]["value"]
    ratio = summary["stall_worst_mean_s"] / summary["normal_gap_s"]
    assert stretch == pytest.approx(ratio, rel=1e-4)  # diagnosis.json rounds its numbers
    share = evidence["stall gaps, share of all ITL gaps"]["value"]
    assert share == pytest.approx(summary["stall_gap_share"], rel=1e-4)
    assert "long-prompt prefill" in h1["summary"] and "the normal gap" in h1["summary"]
