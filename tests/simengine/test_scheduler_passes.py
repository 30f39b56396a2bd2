"""``simengine.scheduler`` driven directly: the three passes over the token budget, FCFS
admission, whole prompts without chunking, and recompute-preemption, step by step."""

from __future__ import annotations

from array import array

import numpy as np

from simengine.core import EngineRequest
from simengine.sampler import TokenStream
from simengine.scheduler import Schedule, Scheduler, SequenceState
from workloads.prefix import BlockPool, CacheScope

BLOCK = 4


def _scheduler(budget: int, blocks: int = 50, seqs: int = 8, chunked: bool = True) -> Scheduler:
    pool = BlockPool(blocks, BLOCK, enable_caching=False)
    return Scheduler(pool, max_num_batched_tokens=budget, max_num_seqs=seqs,
                     enable_chunked_prefill=chunked)  # fmt: skip


def _add(scheduler: Scheduler, rid: str, prompt_len: int) -> SequenceState:
    prompt = np.arange(100, 100 + prompt_len, dtype=np.int64)
    request = EngineRequest(rid, prompt.tolist(), max_tokens=16)
    stream = TokenStream(1, None, 1.0, 1000, None)
    seq = SequenceState(request, array("q", prompt.tobytes()), scheduler.pool, CacheScope(), stream)
    scheduler.add(seq, prompt)
    return seq


def _computed(step: Schedule) -> None:
    """What the engine does with a step: chunks and decodes become computed, and a
    sequence whose inputs are all computed samples one more token."""
    for seq in step.decodes:
        seq.num_computed = len(seq.tokens)
        seq.tokens.append(7)
    for seq, chunk in step.prefills:
        seq.num_computed += chunk
        if seq.num_computed == len(seq.tokens):
            seq.tokens.append(7)


def _ids(pairs) -> list:
    return [(s.request.request_id, n) for s, n in pairs]


def test_decodes_first_then_partial_prefills_then_admissions_within_the_budget():
    sched = _scheduler(budget=8)
    a, b, c = _add(sched, "a", 4), _add(sched, "b", 12), _add(sched, "c", 4)
    first = sched.schedule()
    assert _ids(first.prefills) == [("a", 4), ("b", 4)]
    assert first.shape.prefill_tokens == 8 and sched.num_waiting == 1
    _computed(first)
    second = sched.schedule()  # a decodes (1), b's next chunk takes the other 7
    assert second.decodes == [a] and _ids(second.prefills) == [("b", 7)]
    assert c.admitted is False and second.shape.decode_tokens == 1
    _computed(second)
    third = sched.schedule()  # a decodes, b's last prompt token, then c is admitted
    assert third.decodes == [a] and _ids(third.prefills) == [("b", 1), ("c", 4)]
    assert b.num_computed == 11 and sched.num_running == 3


def test_max_num_seqs_keeps_the_rest_waiting_in_order():
    sched = _scheduler(budget=100, seqs=2)
    for rid in "abc":
        _add(sched, rid, 4)
    assert _ids(sched.schedule().prefills) == [("a", 4), ("b", 4)]
    assert [s.request.request_id for s in sched.waiting] == ["c"]


def test_without_chunked_prefill_a_head_that_does_not_fit_whole_blocks_the_queue():
    sched = _scheduler(budget=8, chunked=False)
    _add(sched, "a", 6), _add(sched, "b", 6), _add(sched, "c", 1)
    step = sched.schedule()
    assert _ids(step.prefills) == [("a", 6)]  # b would need 6 of the 2 left; c waits behind it
    assert [s.request.request_id for s in sched.waiting] == ["b", "c"]


def test_out_of_blocks_the_newest_is_preempted_to_the_queue_head_and_recomputed_later():
    sched = _scheduler(budget=100, blocks=3)
    a, b = _add(sched, "a", 4), _add(sched, "b", 4)
    _computed(sched.schedule())  # one block each; both sampled a 5th token
    step = sched.schedule()  # both need a second block, only one is free
    assert step.decodes == [a] and step.preempted == [b] and step.prefills == []
    assert (b.admitted, b.num_computed, len(b.tokens)) == (False, 0, 5)
    assert sched.waiting[0] is b and sched.num_preemptions == 1
    _computed(step)
    sched.finish(a)
    assert _ids(sched.schedule().prefills) == [("b", 5)]  # prompt + its sampled token


def test_finishing_a_waiting_sequence_takes_it_off_the_queue_and_frees_nothing_twice():
    sched = _scheduler(budget=4)
    a, b = _add(sched, "a", 4), _add(sched, "b", 4)
    sched.schedule()
    free = sched.pool.num_free_or_reclaimable
    sched.finish(b)
    assert sched.num_waiting == 0
    sched.finish(a)
    sched.finish(a)
    assert sched.pool.num_free_or_reclaimable == free + 1
    assert sched.num_running == 0 and sched.schedule().empty
