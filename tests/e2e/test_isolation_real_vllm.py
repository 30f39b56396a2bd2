"""``prefillscope isolation`` against the real vLLM CPU target: salts isolate, one salt leaks.

vLLM hashes ``cache_salt`` into the first block of a prompt, so a second tenant's probe
of the victim's secret computes it afresh, and reports no cached token; the same salt on
both sides is one tenant, whose probe is served from the victim's blocks and says so
(``cached_tokens``, with ``--enable-prompt-tokens-details``). The target's blocks are 128
tokens: a 256-token secret is two of them. The CPU target's TTFT swings by hundreds of
milliseconds on a busy machine, so the verdicts here rest on what vLLM reports; the
timing is in the document and is not asserted on.
"""

from __future__ import annotations

import pytest
from real_target_runs import isolation
from real_vllm import BLOCK_SIZE

pytestmark = [pytest.mark.real_vllm, pytest.mark.slow]

PREFIX = 2 * BLOCK_SIZE
TRIALS = 6


def _isolation(url: str, out, a: str, b: str) -> dict:
    return isolation(url, out, (a, b), PREFIX, TRIALS)


def test_two_salts_are_isolated_by_vllms_own_report(vllm_url, tmp_path):
    doc = _isolation(vllm_url, tmp_path / "salts", "salt:team-a", "salt:team-b")
    (exp,) = doc["experiments"]
    assert doc["target"]["flavour"] == "vllm"
    assert doc["settings"]["cache_between_trials"] == "reset"  # the target has dev mode on
    assert exp["control"]["cached_tokens"]["hits"] == TRIALS
    assert exp["control"]["cached_tokens"]["max_hit_tokens"] == PREFIX
    # no hit across tenants, and vLLM's counts agree with themselves: none of the fresh
    # prefixes (the misses) was reported cached, so they are not set aside
    assert exp["cross"]["cached_tokens"] == {
        "reported": TRIALS, "hits": 0, "max_hit_tokens": 0, "max_miss_tokens": 0,
        "fresh_cached": 0, "fresh_reported": TRIALS,
    }  # fmt: skip
    assert (doc["verdict"]["verdict"], doc["verdict"]["by"]) == ("isolated", "cached_tokens")


def test_one_salt_on_both_sides_leaks_with_cached_tokens_as_proof(vllm_url, tmp_path):
    doc = _isolation(vllm_url, tmp_path / "same", "salt:team-a", "salt:team-a")
    (exp,) = doc["experiments"]
    assert exp["cross"]["cached_tokens"]["hits"] == TRIALS
    assert exp["cross"]["cached_tokens"]["max_hit_tokens"] == PREFIX
    assert (doc["verdict"]["verdict"], doc["verdict"]["by"]) == ("leaks", "cached_tokens")
    assert "one tenant" in doc["notes"][0]
