"""What a load run is asked to do, who it tells as it goes, and what it reports.

``LoadOptions`` (how the plan is sent), ``LoadObserver`` (live callbacks, e.g. the
dashboard) and ``LoadResult`` (how the run went); ``loadgen.run.LoadRun`` runs with them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from loadgen.cache import CacheProtocol
from loadgen.health import DEFAULT_INTERVAL_S
from loadgen.records import ChunkTimes, RequestRecord
from loadgen.sse import MAX_EVENT_BYTES
from runfmt.codec import unrecorded
from runfmt.run_result import ClientAccount, RequestCounts, RunResult, ShardRecord
from runfmt.run_sections import CacheProtocolSection
from runtime.timing import DEFAULT_SPIN_S
from workloads.plan import Prompt, RequestSpec


@dataclass
class LoadOptions:
    """How the plan is sent. Fields map to ``bench`` flags."""

    #: Open loop: at most this many requests in flight; the rest wait in the client.
    max_concurrency: int | None = None
    #: Closed loop: number of users; overrides ``Plan.concurrency``.
    concurrency: int | None = None
    #: Per-request limit from send to the end of the stream; ``None``: no limit.
    request_timeout_s: float | None = 600.0
    #: Largest single stream event (``--max-event-bytes``); a longer one fails the request.
    max_event_bytes: int = MAX_EVENT_BYTES
    cache_protocol: str = "warm"
    ignore_eos: bool = True
    temperature: float | None = 0.0
    logprobs: bool = False
    #: Keep every request's returned token ids on its record (always kept for sessions).
    keep_token_ids: bool = False
    #: Keep every request's streamed text on its record (``output_text``).
    keep_text: bool = False
    #: Users serving warm-up requests; default: the run's concurrency (or 8).
    warmup_concurrency: int | None = None
    #: The narrowest spin window of the send timer (``timing.Waker`` widens it to how
    #: late this machine's wake-ups run).
    spin_s: float = DEFAULT_SPIN_S
    health_interval_s: float = DEFAULT_INTERVAL_S
    #: The server's token ids of a composed text prompt (a later turn's history, chat
    #: template applied for the chat API): its token count, and what the session's
    #: oracle replays (``LoadResult.composed_prompts``); called off the event loop, once
    #: per later turn, during its think time.
    text_tokens: Callable[[str], list[int]] | None = None
    #: After the server is found gone, how long in-flight requests may take to fail on
    #: their own (keeping their real error class) before they are cancelled.
    drain_s: float = 2.0
    #: Release nothing later than this many seconds into the measured phase.
    duration_s: float | None = None
    #: Connections opened before anything is sent (kept alive in the pool).
    preconnect: int = 0
    #: The cache protocol already carried out (by a parent running several shards of one
    #: plan: one reset, one salt); ``cache_protocol`` is then not applied again.
    cache_preset: CacheProtocol | None = None
    #: Awaited once everything before the measured phase is done; returns its start
    #: (run time): how shards of one plan share one schedule. Default: at once.
    start_at: Callable[[], Awaitable[float]] | None = None


class LoadObserver:
    """Live callbacks (a dashboard). Override what you need; each call must be cheap.

    Only overridden methods are called. Nothing is called per network read: a stream's
    reads go to its ``ChunkTimes`` arrays, handed over once by ``on_stream``.
    """

    def on_send(self, record: RequestRecord) -> None:
        """A request was sent (``sent_s`` set)."""

    def on_first_token(self, record: RequestRecord) -> None:
        """Its first token arrived (``first_token_s`` set)."""

    def on_stream(self, record: RequestRecord, chunks: ChunkTimes) -> None:
        """Its answer began streaming: each token-bearing read's run time and token count
        is appended to ``chunks`` from now on, until ``on_finish``."""

    def on_finish(self, record: RequestRecord) -> None:
        """The request ended (ok or not) and its record was written."""


@dataclass
class LoadResult:
    """How a load run went; the statistics come from the run directory's tables."""

    status: str = "running"  # complete | interrupted | failed
    reason: str | None = None
    planned: int = 0
    released: int = 0
    sent: int = 0
    finished: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    started_s: float | None = None
    schedule_t0_s: float | None = None
    ended_s: float | None = None
    cache_protocol: CacheProtocolSection = field(
        default_factory=lambda: unrecorded(CacheProtocolSection)
    )
    client: ClientAccount = field(default_factory=lambda: unrecorded(ClientAccount))
    #: How each worker's shard went, when worker processes sent the plan.
    shards: tuple[ShardRecord, ...] = ()
    #: The token ids later turns sent (history + answer + new message), by request id,
    #: where known: what the session's oracle replays after the run. Not in ``section``.
    composed_prompts: dict[str, Prompt] = field(default_factory=dict, repr=False)

    @property
    def not_sent(self) -> int:
        return self.planned - self.sent

    def section(self) -> RunResult:
        """``run.json``'s ``result`` as the run stands."""
        return RunResult(
            status=self.status,
            reason=self.reason,
            requests=RequestCounts(
                planned=self.planned,
                released=self.released,
                sent=self.sent,
                finished=self.finished,
                ok=self.ok,
                not_sent=self.not_sent,
            ),
            errors=MappingProxyType(dict(self.errors)),
            started_s=self.started_s,
            schedule_t0_s=self.schedule_t0_s,
            ended_s=self.ended_s,
            cache_protocol=self.cache_protocol,
            client=self.client,
            shards=self.shards,
        )


def observer_hook(observer: LoadObserver | None, name: str) -> Any:
    """The observer's method ``name`` when it overrides ``LoadObserver``'s, else None (a
    hook nobody overrides stays off the hot path)."""
    if observer is None or getattr(type(observer), name) is getattr(LoadObserver, name):
        return None
    return getattr(observer, name)


def new_record(spec: RequestSpec, intended_s: float) -> RequestRecord:
    """The record of ``spec`` sent (or due) at run time ``intended_s``, before any answer."""
    return RequestRecord(
        id=spec.id,
        kind=spec.kind,
        group=spec.group,
        tenant=spec.tenant,
        lora=spec.lora,
        session=spec.session,
        turn=spec.turn,
        warmup=spec.warmup,
        intended_s=intended_s,
        released_s=intended_s,
        expected_cached_tokens=spec.expected_cached_tokens,
        max_tokens=spec.max_tokens,
    )
