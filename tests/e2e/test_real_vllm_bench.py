"""``prefillscope bench`` against the real vLLM CPU target: the oracle, the reset, the
server section and vLLM's error bodies.

A shared-prefix run (four system prompts of 300–1400 tokens, so 2–10 of vLLM's 128-token
blocks each and mostly a partial block at the end, then a unique suffix per request) is
sent by one closed-loop user: each request's prefix is cached before the next one
arrives, as the sequential oracle assumes, so the oracle at vLLM's block size must equal
vLLM's own ``cached_tokens`` request by request. The same run, sent again with
``--cache-protocol reset``, must start cold (the reset went through
``/reset_prefix_cache``) and see the same cached tokens throughout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from bench_support import bench_cli, read_json, requests_table
from real_vllm import BLOCK_SIZE, MAX_MODEL_LEN, VOCAB_SIZE

pytestmark = pytest.mark.real_vllm

SHARED_PREFIX = [
    "--workload", "system-prompt", "--num-requests", "40", "--concurrency", "1", "--seed", "3",
    "--set", "prefix_len=uniform:300-1400", "--set", "output_len=8",
]  # fmt: skip
#: Two prompts longer than the model's 4096-token context.
OVER_LONG = [
    "--workload", "system-prompt", "--num-requests", "2", "--concurrency", "1",
    "--set", f"prefix_len={MAX_MODEL_LEN + 100}", "--set", "output_len=4",
]  # fmt: skip


def bench_vllm(
    url: str, out: Path, workload: list[str], exit_code: int = 0
) -> tuple[dict[str, Any], pd.DataFrame]:
    """``prefillscope bench --endpoint URL … --json`` as a command: (summary, requests)."""
    done = bench_cli(
        "--endpoint", url, *workload, "--vocab-size", str(VOCAB_SIZE),
        "--cache-protocol", "reset", "--metrics-interval", "0.1", "--gpu-telemetry", "off",
        "--out", str(out), "--json",
    )  # fmt: skip
    assert done.returncode == exit_code, done.stderr
    return json.loads(done.stdout), requests_table(out)


@pytest.fixture(scope="module")
def shared_prefix(vllm_url: str, tmp_path_factory: pytest.TempPathFactory):
    """The shared-prefix run twice, each after a cache reset: [(run dir, summary, requests)]."""
    runs = []
    for _ in range(2):
        out = tmp_path_factory.mktemp("shared-prefix") / "run"
        runs.append((out, *bench_vllm(vllm_url, out, SHARED_PREFIX)))
    return runs


def test_the_oracle_equals_vllms_cached_tokens_request_by_request(shared_prefix) -> None:
    run, _, requests = shared_prefix[0]
    oracle = read_json(run, "run.json")["oracle"]
    assert oracle["source"] == "server metrics" and oracle["block_size"] == BLOCK_SIZE
    assert (requests["status"] == "ok").all() and len(requests) == 40
    assert requests["cached_tokens"].notna().all()
    matches = int((requests["cached_tokens"] == requests["expected_cached_tokens"]).sum())
    print(f"\noracle vs vLLM cached_tokens: {matches}/{len(requests)}")
    assert matches == len(requests), requests[["id", "cached_tokens", "expected_cached_tokens"]]
    # The prefixes span several blocks, and their partial last block is not cached.
    hits = set(requests["cached_tokens"]) - {0}
    assert len(hits) >= 3 and min(hits) >= 2 * BLOCK_SIZE
    assert all(hit % BLOCK_SIZE == 0 for hit in hits)


def test_a_reset_run_starts_cold(shared_prefix) -> None:
    (first_run, _, first), (second_run, _, second) = shared_prefix
    for run in (first_run, second_run):
        protocol = read_json(run, "run.json")["cache_protocol"]
        assert protocol["requested"] == protocol["applied"] == "reset", protocol
    by_id = first.merge(second, on="id", suffixes=("_first", "_second")).sort_values("id")
    assert len(by_id) == 40
    # Without the reset the second run's first request would find its prefix cached.
    assert by_id["cached_tokens_first"].iloc[0] == by_id["cached_tokens_second"].iloc[0] == 0
    assert (by_id["cached_tokens_first"] == by_id["cached_tokens_second"]).all()


def test_the_server_section_reads_vllms_counters(shared_prefix) -> None:
    _, summary, _ = shared_prefix[0]
    server = summary["server"]
    assert server["available"] and server["flavour"] == "vllm"
    assert server["probe"]["state"] == "ok"
    prefix = server["prefix"]
    observed, expected = prefix["observed_hit_rate"], prefix["expected_hit_rate"]
    assert observed["provenance"] == "measured"
    assert "vllm:prefix_cache_hits_total" in observed["source"]
    assert expected["value"] > 0.4
    assert observed["value"] == pytest.approx(expected["value"], abs=0.01)
    assert summary["prefix"]["observed_hit_rate"] == pytest.approx(expected["value"], abs=1e-9)
    kv_usage = server["kv_usage"]
    assert kv_usage["provenance"] == "measured"
    assert kv_usage["p50"] is not None and kv_usage["max"] > 0
    assert server["block_size"] == {
        "value": BLOCK_SIZE,
        "provenance": "measured",
        "source": "vllm:cache_config_info label block_size",
    }
    assert server["num_blocks"]["provenance"] == "measured"


def test_an_over_long_prompt_is_a_4xx_with_vllms_message(vllm_url: str, tmp_path: Path) -> None:
    # sent anyway (--allow-overlong; without it bench refuses them before the run), so
    # every request fails: exit 4, and vLLM's own message is kept on each row
    run = tmp_path / "run"
    summary, requests = bench_vllm(vllm_url, run, [*OVER_LONG, "--allow-overlong"], exit_code=4)
    assert summary["errors"] == {"http_4xx": 2}
    assert (requests["status"] == "error").all()
    assert (requests["error_kind"] == "http_4xx").all() and (requests["http_status"] == 400).all()
    for row in requests.itertuples():
        assert f"maximum context length is {MAX_MODEL_LEN} tokens" in row.error_message
        assert f"your prompt contains {row.prompt_tokens} input tokens" in row.error_message
