"""``prefillscope isolation`` against the real SGLang CPU target: which request field
scopes SGLang's radix cache per tenant.

SGLang 0.5.23 keys its radix tree by the request's ``extra_key`` (what ``salt:`` sends to
SGLang's ``/generate``; ``cache_salt`` is folded into the same key): a second tenant's
probe of the victim's prefix finds nothing cached, and SGLang's ``cached_tokens`` says so.
The OpenAI ``user`` field is not part of the key: two users share one cache, and the
second is served the first's prefix. Page size 1, so the whole 256-token prefix is what
a hit reports. The verdicts rest on SGLang's ``cached_tokens`` (``--enable-cache-report``),
not on TTFT, which swings on a busy 2-core machine.
"""

from __future__ import annotations

import pytest
from real_target_runs import isolation

pytestmark = [pytest.mark.real_sglang, pytest.mark.slow]

PREFIX = 256
TRIALS = 4


def _isolation(url: str, out, a: str, b: str) -> dict:
    doc = isolation(url, out, (a, b), PREFIX, TRIALS)
    (exp,) = doc["experiments"]
    verdict = f"{doc['verdict']['verdict']} by {doc['verdict']['by']}"
    control, cross = exp["control"]["cached_tokens"], exp["cross"]["cached_tokens"]
    print(f"\n{a} vs {b}: {verdict}; control {control}, cross {cross}")
    return doc


def test_extra_key_scopes_sglangs_cache_per_tenant(sglang_url, tmp_path):
    doc = _isolation(sglang_url, tmp_path / "salts", "salt:team-a", "salt:team-b")
    (exp,) = doc["experiments"]
    assert doc["target"]["flavour"] == "sglang"
    assert doc["settings"]["cache_between_trials"] == "reset"  # SGLang's /flush_cache
    assert exp["control"]["cached_tokens"]["hits"] == TRIALS
    assert exp["control"]["cached_tokens"]["max_hit_tokens"] == PREFIX
    assert exp["cross"]["cached_tokens"]["hits"] == 0
    assert (doc["verdict"]["verdict"], doc["verdict"]["by"]) == ("isolated", "cached_tokens")


def test_the_openai_user_field_does_not_scope_it(sglang_url, tmp_path):
    doc = _isolation(sglang_url, tmp_path / "users", "user:u1", "user:u2")
    (exp,) = doc["experiments"]
    assert exp["cross"]["cached_tokens"]["hits"] == TRIALS
    assert exp["cross"]["cached_tokens"]["max_hit_tokens"] == PREFIX
    assert (doc["verdict"]["verdict"], doc["verdict"]["by"]) == ("leaks", "cached_tokens")
