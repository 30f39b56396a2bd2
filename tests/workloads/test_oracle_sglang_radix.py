"""Our oracle against SGLang's own radix cache, request by request.

``tests/fixtures/sglang/radix-cached-tokens.json`` holds token sequences and the
``cached_tokens`` SGLang's ``RadixCache`` gave each request (run as a library, one
request at a time, as its scheduler does; its README says how it was made). Here the
same sequences go through our oracle (``workloads.oracle.PrefixOracle``) under a named
cache model, and each request's prediction must equal SGLang's:

* with a pool that never fills, vLLM's block model at SGLang's token granularity (block
  size 1) already matches: the longest cached prefix, capped at the prompt but its last
  token, in the request's own namespace (``extra_key``, our ``cache_salt``);
* under eviction only a radix model can: SGLang evicts least recently used *leaves*
  of its tree, vLLM's pool the tail blocks of released sequences.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
from functools import cache
from typing import Any

import pytest
from repo_paths import FIXTURES

from workloads.oracle import PrefixOracle
from workloads.prefix import CacheScope

FIXTURE = FIXTURES / "sglang" / "radix-cached-tokens.json"
#: Whether the oracle can be told which cache a server keeps (``workloads.cache_model``).
HAS_CACHE_MODELS = (
    importlib.util.find_spec("workloads.cache_model") is not None
    and "cache_model" in inspect.signature(PrefixOracle).parameters
)
NO_RADIX = "the radix cache model (workloads.cache_model, PrefixOracle(cache_model=)) is missing"


@cache
def fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def scenarios(*, evicting: bool | None = None) -> list[str]:
    return [
        s["name"]
        for s in fixture()["scenarios"]
        if evicting is None or (s["pool_tokens"] is not None) == evicting
    ]


def scenario(name: str) -> tuple[list[dict[str, Any]], int | None, list[int]]:
    """A scenario's requests, pool size and SGLang's cached tokens per request."""
    found = next(s for s in fixture()["scenarios"] if s["name"] == name)
    requests = fixture()["sequences"][found["sequences"]]["requests"]
    return requests, found["pool_tokens"], found["sglang_cached_tokens"]


def oracle_cached_tokens(
    requests: list[dict[str, Any]], cache_model: str, pool_tokens: int | None
) -> list[int]:
    """Our oracle's cached tokens per request, sent one at a time in order, for a cache
    model (``blocks`` or ``radix``) at token granularity and a pool of ``pool_tokens``."""
    kwargs: dict[str, Any] = {"vocab_size": fixture()["vocab_size"]}
    if cache_model != "blocks":
        from workloads.cache_model import parse_cache_model  # only where it exists

        kwargs["cache_model"] = parse_cache_model(cache_model)
    oracle = PrefixOracle(1, pool_tokens, "", **kwargs)
    return [
        oracle.record(
            r["tokens"], CacheScope(cache_salt=r["extra_key"]), prompt_len=r["prompt_len"]
        )
        for r in requests
    ]


def _table(requests: list[dict[str, Any]], ours: list[int], sglang: list[int]) -> str:
    rows = [f"{'id':>12} {'prompt':>6} {'ours':>5} {'sglang':>6}"]
    for r, a, b in zip(requests, ours, sglang, strict=True):
        rows.append(f"{r['id']:>12} {r['prompt_len']:>6} {a:>5} {b:>6}{'' if a == b else ' *'}")
    return "\n".join(rows)


def test_the_fixture_was_made_by_sglangs_own_code() -> None:
    doc = fixture()
    assert doc["sglang"].startswith("0.5.") and "RadixCache" in doc["cache"]
    # Hits, misses and evictions all occur, so agreement below is not trivial.
    hits = {name: scenario(name)[2] for name in scenarios()}
    assert all(0 in h and max(h) > 200 for h in hits.values())
    assert sum(hits["shared-prefix-evicting"]) < sum(hits["shared-prefix"])


@pytest.mark.parametrize("name", scenarios(evicting=False))
def test_without_eviction_token_blocks_equal_sglang_per_request(name: str) -> None:
    requests, pool, sglang = scenario(name)
    ours = oracle_cached_tokens(requests, "blocks", pool)
    print(
        f"\n{name}: blocks at block size 1 vs SGLang RadixCache\n" + _table(requests, ours, sglang)
    )
    assert ours == sglang


@pytest.mark.skipif(not HAS_CACHE_MODELS, reason=NO_RADIX)
@pytest.mark.parametrize("name", scenarios())
def test_the_radix_model_equals_sglang_per_request(name: str) -> None:
    requests, pool, sglang = scenario(name)
    ours = oracle_cached_tokens(requests, "radix", pool)
    print(f"\n{name}: radix model vs SGLang RadixCache\n" + _table(requests, ours, sglang))
    assert ours == sglang
