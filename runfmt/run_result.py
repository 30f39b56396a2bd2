"""``run.json``'s ``result``: the load generator's account of how the run went, typed.

``loadgen.load_options.LoadResult`` fills itself in as the run goes and hands this
section over at the end (``LoadResult.section``); with worker processes or Ray actors each
shard's section crosses the process boundary as the codec's JSON and
``session.shard_results.merge_results`` sums them into the run's, listing each in
``shards``. Counts are requests; times are seconds on the run clock; ``client`` is the
sending process's own account (its event loop's worst lag, the CPU it used, its send
timer's wake-ups), summed or worst over the workers.

A section the run never got to (a worker that died before its account, a run that failed
before its cache protocol) is written ``{}``: ``runfmt.codec.unrecorded`` builds one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runfmt.codec import EMPTY, key
from runfmt.run_sections import CacheProtocolSection


@dataclass(frozen=True)
class RequestCounts:
    """The plan's requests (warm-ups included), those released to be sent, sent, finished
    and finished ok; ``not_sent`` is planned less sent."""

    planned: int = 0
    released: int = 0
    sent: int = 0
    finished: int = 0
    ok: int = 0
    not_sent: int = 0
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class SendTimer:
    """The send timer (``runtime.timing.Waker``): its wake-ups, how late the recent ones
    ran at worst, its narrowest and widest spin windows. Absent keys: not recorded (a
    worker that died)."""

    wakeups: int | None = key(omit_none=True, default=None)
    recent_wake_late_max_s: float | None = key(omit_none=True, default=None)
    spin_s: float | None = key(omit_none=True, default=None)
    widest_spin_s: float | None = key(omit_none=True, default=None)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class ClientAccount:
    """The sending process's own account: its health samples, worst event-loop lag, CPU
    seconds and share, its send timer; ``workers`` when worker processes sent the plan."""

    workers: int | None = key(omit_none=True, default=None)
    samples: int = 0
    loop_lag_max_s: float | None = None
    cpu_s: float = 0.0
    cpu_share: float | None = None
    timer: SendTimer = field(default_factory=SendTimer)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class ShardRecord:
    """How one worker's shard went (its index in the plan's split)."""

    index: int
    status: str | None = None
    reason: str | None = None
    requests: RequestCounts = field(default_factory=RequestCounts)
    client: ClientAccount = field(default_factory=ClientAccount)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class RunResult:
    """How the load run went: its status (``complete``, ``interrupted``, ``failed``) and
    reason, its requests, its errors by kind, when it started, when its schedule's zero
    was and when it ended, the cache protocol carried out, the client's account, and
    each shard's account when worker processes sent the plan."""

    status: str = "running"
    reason: str | None = None
    requests: RequestCounts = field(default_factory=RequestCounts)
    errors: Mapping[str, int] = field(default_factory=EMPTY)
    started_s: float | None = None
    schedule_t0_s: float | None = None
    ended_s: float | None = None
    cache_protocol: CacheProtocolSection = field(default_factory=CacheProtocolSection)
    client: ClientAccount = field(default_factory=ClientAccount)
    shards: tuple[ShardRecord, ...] = key(omit_empty=True, default=())
    extra: Mapping[str, Any] = field(default_factory=EMPTY)
