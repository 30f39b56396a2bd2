"""The scheduler's memo of prompt hash chains: a repeated prompt reuses its chain, which
must be exactly ``block_hashes`` of it in its scope, and the memo stays within its bytes."""

from __future__ import annotations

from array import array

import numpy as np

from simengine import scheduler as scheduler_mod
from simengine.core import EngineRequest
from simengine.sampler import TokenStream
from simengine.scheduler import Scheduler, SequenceState
from workloads.prefix import BlockPool, CacheScope, block_hashes

BLOCK = 4


def _add(scheduler: Scheduler, rid: str, prompt: np.ndarray, scope: CacheScope) -> SequenceState:
    request = EngineRequest(rid, prompt, max_tokens=4, scope=scope)
    stream = TokenStream(1, None, 1.0, 1000, None)
    seq = SequenceState(request, array("q", prompt.tobytes()), scheduler.pool, scope, stream)
    scheduler.add(seq, prompt)
    return seq


def _scheduler() -> Scheduler:
    return Scheduler(BlockPool(64, BLOCK), max_num_batched_tokens=64, max_num_seqs=8,
                     enable_chunked_prefill=True)  # fmt: skip


def test_repeated_prompt_gets_its_own_chain_in_its_scope():
    sched = _scheduler()
    prompt = np.arange(10, 31, dtype=np.int64)  # 5 full blocks and a partial one
    a, b = CacheScope(model="m"), CacheScope(model="m", cache_salt="tenant")
    first = _add(sched, "r1", prompt, a)
    first.hashes.append(123)  # a sequence's chain grows with its output: not the memo's
    again = _add(sched, "r2", prompt.copy(), a)
    salted = _add(sched, "r3", prompt, b)
    assert again.hashes == block_hashes(prompt, BLOCK, a)
    assert len(again.hashes) == 5
    assert salted.hashes == block_hashes(prompt, BLOCK, b) != again.hashes
    other = prompt.copy()
    other[-1] += 1  # the partial block changes no full block's hash ...
    assert _add(sched, "r4", other, a).hashes == again.hashes
    other[0] += 1  # ... the first token changes every one
    assert _add(sched, "r5", other, a).hashes == block_hashes(other, BLOCK, a)


def test_memo_drops_the_oldest_prompts_past_its_bytes(monkeypatch):
    monkeypatch.setattr(scheduler_mod, "PROMPT_CHAIN_BYTES", 3 * 8 * 8)  # three 8-token prompts
    sched = _scheduler()
    prompts = [np.arange(i, i + 8, dtype=np.int64) for i in range(0, 50, 10)]
    for i, prompt in enumerate(prompts):
        seq = _add(sched, f"r{i}", prompt, CacheScope())
        assert seq.hashes == block_hashes(prompt, BLOCK)
    kept = [key[1] for key in sched._chains]
    assert kept == [p.tobytes() for p in prompts[-3:]]
    assert sched._chain_bytes == 3 * 8 * 8
