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
real-time driver move it the same way. ``advance(next_event_s())`` always moves the link
on — a transfer whose time on the wire is below the clock's resolution (a 1 kB transfer
at 10⁹ Gb/s, a day into a run) leaves the wire at that very time — so a loop that moves
from event to event cannot stall on a zero-length step.

Every link value a user gives is bounded by ``LINK_BOUNDS`` (in its flag's unit), the one
definition ``serve``, ``simulate`` and ``bench --engine`` check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from workloads.errors import InputError
from workloads.limits import Bound

LINK_SHARING = ("fair", "fifo")


class LinkFlag(NamedTuple):
    """A KV-link flag: the ``LinkSpec`` field it sets, the flag's units per unit of the
    field (µs per s), and its bound in the flag's unit."""

    field: str
    per: float
    bound: Bound


#: Every KV-link flag and its bound: beyond an hour a fixed cost is a typo, beyond an
#: exabit per second a link speed is.
LINK_BOUNDS: dict[str, LinkFlag] = {
    "--kv-link-gbps": LinkFlag("gbps", 1.0, Bound(0, 1e9, above=True, why="an exabit per second")),
    "--kv-link-latency-us": LinkFlag("latency_s", 1e6, Bound(0, 3.6e9, why="an hour")),
    "--kv-transfer-overhead-us": LinkFlag("overhead_s", 1e6, Bound(0, 3.6e9, why="an hour")),
    "--kv-link-efficiency": LinkFlag("efficiency", 1.0, Bound(0, 1, above=True)),
}


@dataclass(frozen=True)
class LinkSpec:
    """The link's speed, fixed costs and sharing policy."""

    gbps: float = 100.0
    latency_s: float = 0.0
    overhead_s: float = 0.0
    efficiency: float = 1.0
    sharing: str = "fair"

    @classmethod
    def from_flags(
        cls, gbps: float, latency_us: float, overhead_us: float, efficiency: float, sharing: str
    ) -> LinkSpec:
        """The link of the ``--kv-*`` flags' values (µs as given), each checked in its unit."""
        given = dict(zip(LINK_BOUNDS, (gbps, latency_us, overhead_us, efficiency), strict=True))
        for flag, value in given.items():
            LINK_BOUNDS[flag].bound.check(flag, value)
        fields = {
            LINK_BOUNDS[flag].field: value / LINK_BOUNDS[flag].per for flag, value in given.items()
        }
        spec = cls(**fields, sharing=sharing)
        spec.validate()
        return spec

    def validate(self) -> None:
        """Every field within its flag's bound (``LINK_BOUNDS``), the sharing a known one."""
        for flag, (name, per, bound) in LINK_BOUNDS.items():
            value = getattr(self, name)
            bound.check(flag, value * per if isinstance(value, int | float) else value)
        if self.sharing not in LINK_SHARING:
            raise InputError("--kv-link-sharing", f"unknown policy {self.sharing!r}", "fair|fifo")

    @property
    def bytes_per_s(self) -> float:
        return self.gbps * 1e9 / 8 * self.efficiency


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
            times.append(self._wire_step()[2])
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

    def _wire_step(self) -> tuple[list[Transfer], float, float]:
        """The transfers sending now, the bytes the first of them still has to send, and
        when it leaves the wire at the current share: the one computation of that moment,
        so ``_progress`` reaches exactly the time ``next_event_s`` announced."""
        sharers = self._wire if self.spec.sharing == "fair" else self._wire[:1]
        first = min(t.remaining for t in sharers)
        return sharers, first, self._now + first / (self._rate / len(sharers))

    def _progress(self, now: float) -> None:
        """Drain the wire from the last event to ``now``, one completion at a time.

        A completion due by ``now`` happens even when it is due at the current time
        itself (its remaining bytes take less than the clock can resolve): every pass
        either ends a transfer or stops, so the loop ends and the link always moves on.
        """
        while self._wire and now >= self._now:
            sharers, first, end = self._wire_step()
            if end > now:  # partway: every sharer sends at its share until ``now``
                sent = (now - self._now) * self._rate / len(sharers)
                for t in sharers:
                    t.remaining -= sent
                self.busy_s += now - self._now
                self._now = now
                break
            finishing = [t for t in sharers if t.remaining <= first * (1 + 1e-12)]
            for t in sharers:  # each sharer sent what the first had left
                t.remaining -= first
            self.busy_s += end - self._now
            self._now = end
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
