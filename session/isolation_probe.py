"""Sending the isolation experiment's requests, one at a time, each as its tenant.

Each tenant has its own ``loadgen.exchange.Exchanger`` (the load generator's one way of
sending a request and timing its stream): its target carries the tenant's API key, its
headers the tenant's, and every body the tenant's salt, LoRA name and ``user`` field
(``Tenant``). A request is prepared first and held until its intended send time, a
moment later, so its TTFT counts from that time as every TTFT of a run does; it asks for
one output token. Prompts are token ids (``workloads.plan.Prompt``): a secret or fresh
prefix and a fresh suffix, so two probes share exactly the prefix.

Nothing of a prompt is kept: a probe's row holds its timing, its token counts and how it
ended, never its ids or the server's error text (which might quote them).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import numpy as np

from loadgen.adapters import Outgoing, RequestParams, adapter_for
from loadgen.arrivals import ArrivalStamps
from loadgen.cache import apply_cache_protocol
from loadgen.exchange import Exchanger, Prepared
from loadgen.load_options import new_record
from loadgen.records import ChunkTimes, RequestRecord
from loadgen.target import Target
from runtime.clock import RunClock
from runtime.json_codec import dumps
from runtime.timing import Waker
from session.isolation_tenants import Tenant
from workloads.plan import Prompt, RequestSpec

#: How far ahead of its send time a request is prepared.
LEAD_S = 0.005


@dataclass(frozen=True)
class Sent:
    """What one request of the experiment measured."""

    ttft_s: float | None
    cached_tokens: int | None
    prompt_tokens: int | None
    ok: bool
    error_kind: str | None
    http_status: int | None

    @classmethod
    def of(cls, record: RequestRecord) -> Sent:
        ttft = None
        if record.ok and record.first_token_s is not None and record.intended_s is not None:
            ttft = record.first_token_s - record.intended_s
        kind = None if record.error_kind is None else str(record.error_kind)
        return cls(
            ttft, record.cached_tokens, record.prompt_tokens, record.ok, kind, record.http_status
        )


class Prober:
    """The experiment's client: one exchanger per tenant on one session and clock."""

    def __init__(self, session: aiohttp.ClientSession, target: Target, timeout_s: float | None):
        self.session = session
        self.target = target
        self.timeout_s = timeout_s
        self.clock = RunClock()
        self.stamps: ArrivalStamps | None = None
        self._waker = Waker(self.clock.now)
        self._exchangers: dict[str, Exchanger] = {}

    def _exchanger(self, tenant: Tenant) -> Exchanger:
        if tenant.role not in self._exchangers:
            assert self.stamps is not None
            target = replace(self.target, api_key=tenant.api_key or self.target.api_key)
            adapter = adapter_for(target, RequestParams(ignore_eos=True, temperature=0.0))
            exchanger = Exchanger(
                self.session, adapter, self.clock, timeout_s=self.timeout_s,
                stamps=self.stamps, waker=self._waker,
            )  # fmt: skip
            exchanger.headers = exchanger.headers | dict(tenant.headers)
            self._exchangers[tenant.role] = exchanger
        return self._exchangers[tenant.role]

    async def send(self, tenant: Tenant, prompt: Prompt, request_id: str) -> Sent:
        """Send ``prompt`` as ``tenant`` (one output token); what it measured."""
        exchanger = self._exchanger(tenant)
        spec = RequestSpec(
            id=request_id, prompt=prompt, max_tokens=1, tenant=tenant.role, lora=tenant.lora
        )
        ids = prompt.token_ids(self.target.vocab_size or 0)
        body: dict[str, Any] = exchanger.adapter.body(Outgoing(spec, ids, tenant.salt))
        body |= tenant.body_fields()
        due = self.clock.now() + LEAD_S
        prepared = Prepared(dumps(body), ids, len(ids), not_before=due)
        record = new_record(spec, due)
        await exchanger.send(prepared, record, ChunkTimes())
        return Sent.of(record)

    async def reset(self) -> str | None:
        """Empty the server's prefix cache; None when done, else why it could not."""
        protocol = await apply_cache_protocol(self.session, self.target, "reset")
        if protocol.applied == "reset":
            return None
        return protocol.note or f"{self.target.flavour} cannot reset its prefix cache"


@contextlib.asynccontextmanager
async def prober(target: Target, timeout_s: float | None) -> AsyncIterator[Prober]:
    """A ``Prober`` with its connection pool and arrival stamps, closed after."""
    import asyncio

    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False
    ) as session:
        client = Prober(session, target, timeout_s)
        client.stamps = ArrivalStamps(asyncio.get_running_loop())
        try:
            yield client
        finally:
            client.stamps.close()


def prompt_of(prefix: np.ndarray | int, length: int, suffix_key: int, suffix: int) -> Prompt:
    """A prefix (explicit ids, or ``length`` ids drawn from a key) and a fresh suffix."""
    from workloads.plan import Segment

    head = (
        Segment(length, key=int(prefix))
        if isinstance(prefix, int)
        else Segment(length, tokens=tuple(int(t) for t in prefix[:length]))
    )
    return Prompt((head, Segment(suffix, key=suffix_key)))
