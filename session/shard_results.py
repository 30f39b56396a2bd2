"""One run's result from its shards' results (``session.workers``, ``session.ray_workers``)."""

from __future__ import annotations

from typing import Any

from loadgen.load_options import LoadResult
from runtime import signals


def merge_results(into: LoadResult, shards: list[dict[str, Any]]) -> None:
    """One run's result from its shards' (``LoadResult.to_json`` each): counts and
    errors summed, the earliest start and latest end, the first failed or interrupted
    shard's status and reason, the client's figures (CPU summed, worst lag)."""
    into.shards = [
        {key: s.get(key) for key in ("index", "status", "reason", "requests", "client")}
        for s in shards
    ]
    for shard in shards:
        counts = shard["requests"]
        into.released += counts.get("released", 0)
        into.sent += counts.get("sent", 0)
        into.finished += counts.get("finished", 0)
        into.ok += counts.get("ok", 0)
        for kind, n in shard.get("errors", {}).items():
            into.errors[kind] = into.errors.get(kind, 0) + n
    ended = sorted(
        (s for s in shards if s["status"] != "complete"), key=lambda s: s["status"] != "failed"
    )  # a failed shard's reason first: it is why the others stopped
    if ended:
        first = ended[0]
        reason = first["reason"] or ""
        if not reason.startswith(signals.STOP_REASON_PREFIX):
            reason = f"shard {first['index']}: {reason}"
        failed = all(s["status"] == "failed" for s in shards)
        into.status, into.reason = "failed" if failed else "interrupted", reason
    else:
        into.status = "complete"
    times = [(s.get("started_s"), s.get("schedule_t0_s"), s.get("ended_s")) for s in shards]
    starts = [t[0] for t in times if t[0] is not None]
    into.started_s = min(starts) if starts else None
    into.schedule_t0_s = next((t[1] for t in times if t[1] is not None), None)
    ends = [t[2] for t in times if t[2] is not None]
    into.ended_s = max(ends) if ends else None
    into.cache_protocol = next((s["cache_protocol"] for s in shards if s.get("cache_protocol")), {})
    clients = [s.get("client") or {} for s in shards]
    into.client = {
        "workers": len(shards),
        "samples": sum(c.get("samples", 0) for c in clients),
        "loop_lag_max_s": max((c.get("loop_lag_max_s") or 0.0 for c in clients), default=0.0),
        "cpu_s": sum(c.get("cpu_s") or 0.0 for c in clients),
        "cpu_share": max((c.get("cpu_share") or 0.0 for c in clients), default=None),
        "timer": _merge_timers([c.get("timer") or {} for c in clients]),
    }


def _merge_timers(timers: list[dict[str, Any]]) -> dict[str, Any]:
    """The send timers of every worker as one: wake-ups summed, the rest the worst."""
    keys = {key for timer in timers for key in timer}
    merged: dict[str, Any] = {}
    for key in sorted(keys):
        values = [t[key] for t in timers if isinstance(t.get(key), int | float)]
        if values:
            merged[key] = sum(values) if key == "wakeups" else max(values)
    return merged
