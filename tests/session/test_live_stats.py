"""The dashboard's live ITL (``session.live_stats``) read off the streams' own chunk arrays:
reads taken over several refreshes, in a worker process's batches or not, give the
summary's per-token gaps (a read of n tokens after g: n gaps of g/n; the extra tokens of a
request's first read: gaps of 0)."""

from __future__ import annotations

import pickle

import numpy as np

from loadgen.records import ChunkTimes, RequestRecord
from runtime.clock import RunClock
from session.live_stats import LiveStats

#: Two requests' reads as (request, seconds before now, tokens), in arrival order, with
#: the refreshes between them.
READS = [
    [("a", 0.9, 3), ("b", 0.85, 1)],
    [("a", 0.8, 1)],
    [],
    [("b", 0.65, 1), ("a", 0.6, 2)],
]
#: Their per-token gaps: a's first read gives 2 gaps of 0, then 0.1, then 0.2 / 2 twice;
#: b's second read comes 0.2 after its first.
GAPS = [0.0, 0.0, 0.1, 0.1, 0.1, 0.2]


def _stream(stats: LiveStats, now: float, batches=None) -> list[RequestRecord]:
    """Feed ``READS`` as the read loop does; after each step a refresh, or (``batches``)
    a worker's ``take_pending`` through a pickle."""
    records = {rid: RequestRecord(id=rid, intended_s=now - 1.0) for rid in "ab"}
    chunks = {rid: ChunkTimes() for rid in "ab"}
    for rid in "ab":
        stats.on_stream(records[rid], chunks[rid])
    for step in READS:
        for rid, before, n in step:
            chunks[rid].t_s.append(now - before)
            chunks[rid].n_tokens.append(n)
        if batches is None:
            stats.snapshot()
        else:
            batches.append(pickle.loads(pickle.dumps(stats.take_pending())))
    for record in records.values():
        stats.on_finish(record)
    return list(records.values())


def _itl_samples(stats: LiveStats) -> list[float]:
    stats.snapshot()
    return sorted(np.concatenate([v for _, _, v in stats._itl._parts]).round(9).tolist())


def test_reads_taken_over_several_refreshes_give_the_summary_gaps() -> None:
    clock = RunClock()
    stats = LiveStats(clock, total=2)
    _stream(stats, clock.now())
    assert _itl_samples(stats) == GAPS
    snap = stats.snapshot()
    assert snap.itl.count == 6 and snap.finished == 2
    assert sum(n for _, _, n in stats._ticks) == 8  # tokens: every read counted once


def test_a_worker_s_batches_give_the_parent_the_same_gaps() -> None:
    clock = RunClock()
    worker, batches = LiveStats(clock, total=2), []
    _stream(worker, clock.now(), batches)
    batches.append(worker.take_pending())  # the reads taken when the requests finished
    parent = LiveStats(clock, total=2)
    for batch in batches:
        parent.absorb(0, batch)
    assert _itl_samples(parent) == GAPS
    assert parent.finished == 2 and sum(n for _, _, n in parent._ticks) == 8


def test_under_a_cap_the_live_ttft_is_from_the_actual_send_and_named_so() -> None:
    """A request held 2 s for a --max-concurrency slot, answered 0.1 s after its send:
    capped, the live TTFT is 0.1 s (vLLM's) and its row says from the send; uncapped, the
    same request's TTFT is from the intended send; the slot's wait is no dispatch lag."""
    from runfmt.metrics import TTFT, TTFT_SENT

    for capped, ttft, metric in ((True, 0.1, TTFT_SENT), (False, 2.1, TTFT)):
        clock = RunClock()
        stats = LiveStats(clock, total=1, capped=capped)
        now = clock.now()
        record = RequestRecord(id="a", intended_s=now - 2.1, released_s=now - 0.1,
                               sent_s=now - 0.1, first_token_s=now)  # fmt: skip
        stats.on_send(record)
        stats.on_first_token(record)
        snap = stats.snapshot()
        assert abs(snap.ttft.p50 - ttft) < 1e-6
        assert snap.latencies()[0][0] == metric
        assert snap.dispatch_lag.p50 == 0.0 and not snap.limited
