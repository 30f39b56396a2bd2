"""The modelled link KV blocks cross from prefill to decode workers.

A transfer of ``B`` bytes takes ``B · 8 / (gbps · 10⁹ · efficiency)`` seconds of the link,
then the fixed ``latency_s`` (propagation, completion notification) and ``overhead_s``
(per-transfer setup: registration, descriptor posting) before the decode worker has it.
Transfers that overlap in time share the link:

* ``fair`` (processor sharing): every transfer in flight gets ``1/n`` of the bandwidth,
  so 8 equal transfers started together each take 8× as long as one alone;
* ``fifo``: one transfer at a time at full rate, the others queued behind it.

The link is clock-free like the engine core: ``start`` and ``advance`` take the time, and
``next_event_s`` says when the next transfer arrives, so a virtual-time loop and a
real-time driver move it the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from workloads.errors import InputError

LINK_SHARING = ("fair", "fifo")


@dataclass(frozen=True)
class LinkSpec:
    """The link's speed, fixed costs and sharing policy."""

    gbps: float = 100.0
    latency_s: float = 0.0
    overhead_s: float = 0.0
    efficiency: float = 1.0
    sharing: str = "fair"

    def validate(self) -> None:
        if not self.gbps > 0 or not math.isfinite(self.gbps):
            raise InputError("--kv-link-gbps", f"must be a positive number, got {self.gbps}")
        if self.latency_s < 0:
            raise InputError("--kv-link-latency-us", "must be >= 0")
        if self.overhead_s < 0:
            raise InputError("--kv-transfer-overhead-us", "must be >= 0")
        if not 0 < self.efficiency <= 1:
            raise InputError("--kv-link-efficiency", "must be in (0, 1]")
        if self.sharing not in LINK_SHARING:
            raise InputError("--kv-link-sharing", f"unknown policy {self.sharing!r}", "fair|fifo")

    @property
    def bytes_per_s(self) -> float:
        return self.gbps * 1e9 / 8 * self.efficiency

    def ideal_seconds(self, nbytes: float) -> float:
        """A lone transfer, start to delivery."""
        return nbytes / self.bytes_per_s + self.latency_s + self.overhead_s


@dataclass(eq=False)
class Transfer:
    """One transfer: what it carries, for whom, and its moments on the clock."""

    request_id: str
    nbytes: int
    start_s: float
    remaining: float = field(init=False)
    wire_end_s: float | None = None
    delivered_s: float | None = None
    #: Transfers on the link (this one included) when it started: the queue depth it saw.
    depth_at_start: int = 0

    def __post_init__(self) -> None:
        self.remaining = float(self.nbytes)

    @property
    def seconds(self) -> float | None:
        return None if self.delivered_s is None else self.delivered_s - self.start_s


class KvLink:
    """One shared link: transfers on the wire, then in their fixed-delay tail."""

    def __init__(self, spec: LinkSpec) -> None:
        spec.validate()
        self.spec = spec
        self._rate = spec.bytes_per_s
        self._tail_s = spec.latency_s + spec.overhead_s
        self._wire: list[Transfer] = []
        self._tail: list[Transfer] = []
        self._now = 0.0
        self.bytes_sent = 0
        self.busy_s = 0.0

    @property
    def queue_depth(self) -> int:
        """Transfers still on the wire (sharing it or queued)."""
        return len(self._wire)

    @property
    def in_flight(self) -> int:
        return len(self._wire) + len(self._tail)

    def start(self, request_id: str, nbytes: int, now: float) -> Transfer:
        """Put a transfer on the link at ``now`` (not before the link's last event)."""
        self._progress(now)
        transfer = Transfer(request_id, nbytes, now, depth_at_start=len(self._wire) + 1)
        if nbytes <= 0:
            transfer.wire_end_s = now
            self._tail.append(transfer)
        else:
            self._wire.append(transfer)
        return transfer

    def next_event_s(self) -> float | None:
        """When the next transfer leaves the wire or is delivered; None when idle."""
        times = [t.wire_end_s + self._tail_s for t in self._tail]  # type: ignore[operator]
        if self._wire:
            if self.spec.sharing == "fair":
                share = self._rate / len(self._wire)
                times.append(self._now + min(t.remaining for t in self._wire) / share)
            else:
                times.append(self._now + self._wire[0].remaining / self._rate)
        return min(times) if times else None

    def advance(self, now: float) -> list[Transfer]:
        """Move the link to ``now``; the transfers delivered by then, in delivery order."""
        self._progress(now)
        done = [t for t in self._tail if t.wire_end_s + self._tail_s <= now]  # type: ignore[operator]
        if not done:
            return []
        self._tail = [t for t in self._tail if t not in done]
        for t in done:
            t.delivered_s = t.wire_end_s + self._tail_s  # type: ignore[operator]
        done.sort(key=lambda t: t.delivered_s)  # type: ignore[arg-type, return-value]
        return done

    def _progress(self, now: float) -> None:
        """Drain the wire from the last event to ``now``, one completion at a time."""
        while self._wire and now > self._now:
            fair = self.spec.sharing == "fair"
            sharers = self._wire if fair else self._wire[:1]
            share = self._rate / len(sharers)
            first = min(t.remaining for t in sharers)
            finishing = [t for t in sharers if t.remaining <= first * (1 + 1e-12)]
            end = self._now + first / share
            step_end = min(end, now)
            sent = (step_end - self._now) * share
            self.busy_s += step_end - self._now
            for t in sharers:
                t.remaining -= sent
            self._now = step_end
            if step_end < end:
                break
            for t in finishing:
                t.remaining = 0.0
                t.wire_end_s = end
                self.bytes_sent += t.nbytes
                self._wire.remove(t)
                self._tail.append(t)
        self._now = max(self._now, now)


def pipelined_exposed_s(
    chunk_bytes: list[int], chunk_prefill_s: float, bytes_per_s: float, fixed_s: float = 0.0
) -> float:
    """Transfer time left after the prefill when each chunk is sent as its step ends.

    Chunk ``i`` (1-based) finishes computing at ``i · chunk_prefill_s`` and queues on the
    link behind the chunks before it: ``done_i = max(done_{i-1}, i · p) + bytes_i / rate``.
    What the decode worker still waits after the last chunk is ``done_n − n · p`` plus the
    fixed costs: the last chunk's transfer when the link keeps up, more when it does not.
    """
    done = 0.0
    for i, nbytes in enumerate(chunk_bytes, start=1):
        done = max(done, i * chunk_prefill_s) + nbytes / bytes_per_s
    return done - len(chunk_bytes) * chunk_prefill_s + fixed_s
