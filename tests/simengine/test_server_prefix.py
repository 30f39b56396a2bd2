"""Prefix caching through the server: cached_tokens, the hit counter, cache_salt, reset."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from server_support import metric, metric_samples, served

rng = np.random.default_rng(2500)
PREFIX = rng.integers(259, 32000, size=2500).tolist()


def _suffix(seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(259, 32000, size=500).tolist()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with served() as c:
        yield c


def _cached(client: httpx.Client, prompt: list[int], salt: str | None = None) -> int:
    body = {"prompt": prompt, "max_tokens": 2, "stream": True}
    body |= {"stream_options": {"include_usage": True}}
    if salt is not None:
        body["cache_salt"] = salt
    with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data: {")]
    usage = httpx.Response(200, content=lines[-1][6:]).json()["usage"]
    assert usage["prompt_tokens"] == len(prompt)
    return usage["prompt_tokens_details"]["cached_tokens"]


def _hits(client: httpx.Client) -> float:
    return metric(client, "vllm:prefix_cache_hits_total")


def test_shared_prefix_is_reused_block_by_block(client: httpx.Client) -> None:
    assert _cached(client, PREFIX + _suffix(1)) == 0
    before = _hits(client)
    queries = metric(client, "vllm:prefix_cache_queries_total")
    assert _cached(client, PREFIX + _suffix(2)) == 2496  # 156 full blocks of 16
    assert _hits(client) - before == 2496
    assert metric(client, "vllm:prefix_cache_queries_total") - queries == 3000


def test_another_cache_salt_shares_nothing(client: httpx.Client) -> None:
    _cached(client, PREFIX + _suffix(1))
    before = _hits(client)
    assert _cached(client, PREFIX + _suffix(2), salt="tenant-b") == 0
    assert _hits(client) == before
    assert _cached(client, PREFIX + _suffix(3), salt="tenant-b") == 2496


def _blocks(client: httpx.Client) -> dict[str, float]:
    return {
        labels[-1][1]: value
        for (name, labels), value in metric_samples(client).items()
        if name == "prefillscope_engine_kv_blocks"
    }


def test_reset_turns_reclaimable_blocks_free(client: httpx.Client) -> None:
    _cached(client, PREFIX + _suffix(1))
    blocks = _blocks(client)
    assert blocks["active"] == 0 and blocks["reclaimable"] == 187  # 3002 tokens → 187 full
    assert sum(blocks.values()) == 400
    response = client.post("/reset_prefix_cache")
    assert response.status_code == 200 and response.json() == {"success": True}
    assert _blocks(client) == {"active": 0, "reclaimable": 0, "free": 400}
    assert _cached(client, PREFIX + _suffix(2)) == 0


def test_reset_is_refused_while_a_request_holds_blocks(client: httpx.Client) -> None:
    body = {"prompt": PREFIX, "max_tokens": 3000, "ignore_eos": True, "stream": True}
    with client.stream("POST", "/v1/completions", json=body) as response:
        lines = response.iter_lines()  # kept alive: dropping it closes the connection
        assert next(lines).startswith("data: {")
        assert _blocks(client)["active"] > 0
        assert client.post("/reset_prefix_cache").json() == {"success": False}
    assert _blocks(client)["reclaimable"] > 0


def test_cache_config_info_names_the_pool(client: httpx.Client) -> None:
    info = [
        dict(labels)
        for (name, labels), _ in metric_samples(client).items()
        if name == "vllm:cache_config_info"
    ]
    assert len(info) == 1
    assert info[0]["block_size"] == "16" and info[0]["num_gpu_blocks"] == "400"
    assert info[0]["enable_prefix_caching"] == "True"
