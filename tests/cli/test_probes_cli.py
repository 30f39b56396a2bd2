"""``prefillscope probe``: one snapshot from a file or a live endpoint, and its errors."""

from __future__ import annotations

import json
import sys

import pytest
from probe_servers import ReplayServer, free_port
from repo_paths import FIXTURES

from prefillscope.cli import main

PROVENANCES = {"measured", "derived", "unknown"}


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """The real entry point in-process: exit status, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["prefillscope", "probe", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def test_probe_file_json(monkeypatch, capsys):
    path = FIXTURES / "vllm-cpu/tiny-metrics-after.prom"
    code, out, _ = run_cli(monkeypatch, capsys, "--file", str(path), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["flavour"] == "vllm"
    series = report["series"]
    for name in (
        "running",
        "waiting",
        "kv_usage",
        "prefix_queries",
        "prefix_hits",
        "preemptions",
        "prompt_tokens",
        "generation_tokens",
        "block_size",
        "num_blocks",
    ):
        assert set(series[name]) >= {"value", "provenance"}
        assert series[name]["provenance"] in PROVENANCES
    assert series["prefix_hits"] == {
        "value": 2432.0,
        "provenance": "measured",
        "source": "vllm:prefix_cache_hits_total",
    }
    assert series["block_size"]["value"] == 128.0
    assert series["num_blocks"]["value"] == 8192.0
    assert report["histograms"]["ttft"]["count"] == 29
    assert report["itl_per"] == "event"
    pool = report["pool"]
    assert set(pool) == {"active_blocks", "reclaimable_blocks", "free_blocks", "total_blocks"}
    assert pool["active_blocks"]["provenance"] == "derived"
    assert pool["reclaimable_blocks"]["value"] is None
    assert pool["reclaimable_blocks"]["provenance"] == "unknown"


def test_probe_live_endpoint(monkeypatch, capsys):
    text = (FIXTURES / "vllm-cpu/small-metrics-under-load.prom").read_text()
    with ReplayServer([text]) as server:
        code, out, _ = run_cli(monkeypatch, capsys, server.url, "--json")
    report = json.loads(out)
    assert code == 0
    assert report["source"] == f"{server.url}/metrics"
    assert report["series"]["running"]["value"] == 8.0
    assert report["series"]["kv_usage"]["value"] == 0.0513196480938416
    assert report["pool"]["active_blocks"]["value"] == 70.0


def test_probe_llamacpp_says_unknown_not_zero(monkeypatch, capsys):
    path = FIXTURES / "llamacpp/metrics-oversubscribed.txt"
    code, out, _ = run_cli(monkeypatch, capsys, "--file", str(path), "--json")
    report = json.loads(out)
    assert code == 0 and report["flavour"] == "llamacpp"
    assert report["series"]["running"]["value"] == 4.0
    assert report["series"]["waiting"]["value"] == 4.0
    assert report["series"]["kv_usage"] == {
        "value": None,
        "provenance": "unknown",
        "source": "llamacpp:kv_cache_usage_ratio not exposed",
    }
    assert report["histograms"]["ttft"]["count"] is None


def test_probe_human_output(monkeypatch, capsys):
    path = FIXTURES / "metrics/sglang-0.4.3.post2-docs.prom"
    code, out, _ = run_cli(monkeypatch, capsys, "--file", str(path))
    assert code == 0
    assert "sglang" in out and "KV pool" in out
    assert "2,826" in out  # the waiting queue
    assert "unknown" in out  # prefix hits: cache_hit_rate is not a run-long hit rate


def one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("prefillscope: error: ")
    return err


def test_malformed_file_is_a_one_line_error(monkeypatch, capsys, tmp_path):
    text = (FIXTURES / "llamacpp/metrics-after.txt").read_text().splitlines()
    text[2] = "llamacpp:prompt_tokens_total{ 4861"
    bad = tmp_path / "bad.prom"
    bad.write_text("\n".join(text) + "\n")
    err = one_line_error(*run_cli(monkeypatch, capsys, "--file", str(bad), "--json"))
    assert "line 3" in err and "bad.prom" in err


def test_endpoint_without_metrics_is_a_one_line_error(monkeypatch, capsys):
    with ReplayServer(["unused"], path="/other") as server:
        err = one_line_error(*run_cli(monkeypatch, capsys, server.url))
    assert "HTTP 404" in err
    err = one_line_error(*run_cli(monkeypatch, capsys, f"http://127.0.0.1:{free_port()}"))
    assert "ConnectionRefusedError" in err


def test_bad_mapping_and_usage_errors(monkeypatch, capsys, tmp_path):
    path = FIXTURES / "vllm-cpu/tiny-metrics-after.prom"
    mapping = tmp_path / "mine.toml"
    mapping.write_text("[series.running]\nmetric = 'x'\nlabelz = {a = 'b'}\n")
    err = one_line_error(
        *run_cli(monkeypatch, capsys, "--file", str(path), "--mapping", str(mapping))
    )
    assert "labelz" in err
    err = one_line_error(*run_cli(monkeypatch, capsys, "--file", str(path), "--flavour", "tgi"))
    assert "--flavour" in err
    one_line_error(*run_cli(monkeypatch, capsys))
    unknown = tmp_path / "other.prom"
    unknown.write_text("acme_queue 3\n")
    err = one_line_error(*run_cli(monkeypatch, capsys, "--file", str(unknown)))
    assert "--mapping" in err
