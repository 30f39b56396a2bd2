"""The prefix oracle against the cached tokens the engine reports, request by request.

Four 512-token prefixes (32 blocks each) shared by requests with a unique 64-token suffix,
sent one at a time (``--max-concurrency 1``: the oracle replays them one after another,
and a busy machine must not make two overlap): with the engine's full pool the oracle
must equal ``cached_tokens`` for every request; with a 90-block pool (smaller than the
four prefixes plus a request's own blocks) it must predict the lower hit rate the engine
then shows — within one block per request. The pool size comes from the engine's own
metrics (``vllm:cache_config_info``), as for any vLLM server.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import bench, read_json, requests_table
from oracle_races import assert_cached_as_expected

pytestmark = pytest.mark.slow  # two runs of 48 requests, one at a time

WORKLOAD = {
    "groups": 4,
    "prefix_len": 512,
    "suffix_len": 64,
    "output_len": 4,
    "num_requests": 48,
    "arrival": "constant",
    "rate": 20,
}


def _run(folder: Path, *engine: str):
    run = folder / "run"
    engine = ("fixed_step_s=0.005", *engine)  # a request: one prefill step, four decode steps
    outcome = bench("shared-prefix", run, engine=engine, overrides=WORKLOAD, max_concurrency=1)
    assert outcome.status == "complete"
    requests = requests_table(run)
    assert (requests["status"] == "ok").all() and len(requests) == 48
    return run, outcome.summary.to_json(), requests


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory):
    return _run(tmp_path_factory.mktemp("large"))


@pytest.mark.timing
def test_oracle_equals_cached_tokens_with_a_large_pool(large) -> None:
    run, summary, requests = large
    oracle = read_json(run, "run.json")["oracle"]
    assert oracle["source"] == "server metrics" and oracle["block_size"] == 16
    assert oracle["num_blocks"] > 10_000
    assert requests["cached_tokens"].notna().all()
    # one at a time: no request races another, so every one is held exactly
    assert assert_cached_as_expected(requests) == 44
    # 4 cold prefixes, then every request hits its group's 32 blocks.
    assert (requests["cached_tokens"] == 512).sum() == 44
    prefix = summary["prefix"]
    assert prefix["observed_hit_rate"] == prefix["expected_hit_rate"]
    assert summary["server"]["window"]["stale"] is False  # the last scrape saw every response
    assert summary["server"]["prefix"]["observed_hit_rate"]["value"] == prefix["expected_hit_rate"]


@pytest.mark.timing
def test_oracle_predicts_the_lower_hit_rate_of_a_small_pool(large, tmp_path: Path) -> None:
    run, small, requests = _run(tmp_path, "num_gpu_blocks=90")
    assert read_json(run, "run.json")["oracle"]["num_blocks"] == 90
    expected, observed = small["prefix"]["expected_hit_rate"], small["prefix"]["observed_hit_rate"]
    assert expected < large[1]["prefix"]["expected_hit_rate"] - 0.2  # thrashing predicted
    error = (requests["cached_tokens"] - requests["expected_cached_tokens"]).abs()
    assert error.mean() <= 16, error.describe()  # within one block per request
    mean_prompt = requests["prompt_tokens"].mean()
    assert abs(observed - expected) <= 16 / mean_prompt
