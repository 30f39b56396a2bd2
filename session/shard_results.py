"""One run's result from its shards' results (``session.workers``, ``session.ray_workers``)."""

from __future__ import annotations

from dataclasses import fields

from loadgen.load_options import LoadResult
from runfmt.run_result import ClientAccount, RunResult, SendTimer, ShardRecord
from runtime import signals


def merge_results(into: LoadResult, shards: list[tuple[int, RunResult]]) -> None:
    """One run's result from its shards' (each ``LoadResult.section``, by the shard's
    index): counts and errors summed, the earliest start and latest end, the first failed
    or interrupted shard's status and reason, the client's figures (CPU summed, worst
    lag)."""
    into.shards = tuple(
        ShardRecord(index, s.status, s.reason, s.requests, s.client) for index, s in shards
    )
    for _, shard in shards:
        counts = shard.requests
        into.released += counts.released
        into.sent += counts.sent
        into.finished += counts.finished
        into.ok += counts.ok
        for kind, n in shard.errors.items():
            into.errors[kind] = into.errors.get(kind, 0) + n
    ended = sorted(
        ((i, s) for i, s in shards if s.status != "complete"), key=lambda s: s[1].status != "failed"
    )  # a failed shard's reason first: it is why the others stopped
    if ended:
        index, first = ended[0]
        reason = first.reason or ""
        if not reason.startswith(signals.STOP_REASON_PREFIX):
            reason = f"shard {index}: {reason}"
        failed = all(s.status == "failed" for _, s in shards)
        into.status, into.reason = "failed" if failed else "interrupted", reason
    else:
        into.status = "complete"
    results = [s for _, s in shards]
    starts = [s.started_s for s in results if s.started_s is not None]
    into.started_s = min(starts) if starts else None
    into.schedule_t0_s = next(
        (s.schedule_t0_s for s in results if s.schedule_t0_s is not None), None
    )
    ends = [s.ended_s for s in results if s.ended_s is not None]
    into.ended_s = max(ends) if ends else None
    into.cache_protocol = next(
        (s.cache_protocol for s in results if s.cache_protocol.applied is not None),
        into.cache_protocol,
    )
    clients = [s.client for s in results]
    into.client = ClientAccount(
        workers=len(shards),
        samples=sum(c.samples for c in clients),
        loop_lag_max_s=max((c.loop_lag_max_s or 0.0 for c in clients), default=0.0),
        cpu_s=sum(c.cpu_s or 0.0 for c in clients),
        cpu_share=max((c.cpu_share or 0.0 for c in clients), default=None),
        timer=_merge_timers([c.timer for c in clients]),
    )


def _merge_timers(timers: list[SendTimer]) -> SendTimer:
    """The send timers of every worker as one: wake-ups summed, the rest the worst."""
    merged = {}
    for f in fields(SendTimer):
        if f.name == "extra":
            continue
        values = [getattr(t, f.name) for t in timers if getattr(t, f.name) is not None]
        if values:
            merged[f.name] = sum(values) if f.name == "wakeups" else max(values)
    return SendTimer(**merged)
