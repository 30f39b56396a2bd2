"""When each network read arrived: the moment the event loop's poll reported it.

A streaming reader learns of new bytes late. In one loop iteration the poll returns the
sockets that became readable; then the loop first runs the callbacks queued earlier
(the reader tasks woken by the *previous* iteration's data, tens of microseconds each),
then reads the sockets and hands the bytes to their protocols (``data_received``), which
wake the reader tasks, which run in the *next* iteration. With hundreds of streams each
step of that queue is milliseconds long and its order changes from one server step to
the next: a clock read in the reader task adds milliseconds of jitter to inter-token
gaps that the server never produced.

So a read is stamped with the return time of the poll that reported it:

* :class:`PollClock` wraps the running loop's selector so that each poll notes
  ``perf_counter()`` when it returns (a plain attribute set; restored by ``close``). A
  loop without a selector — uvloop, which ``runtime.event_loop`` runs the CLI's loads
  on where it is installed — falls back to stamping in ``data_received``: uvloop hands
  a socket's bytes to its protocol as soon as it has read them, in the poll that
  reported them, before the callbacks queued for the loop run.
* :meth:`ArrivalStamps.of` wraps a connection's protocol once, so that each
  ``data_received`` with bytes copies the current poll time to the connection's
  :class:`Arrivals` (aiohttp also calls it with no bytes, to resume its parser: not a
  read). uvloop keeps the ``data_received`` it found when the protocol was set, so the
  protocol is set on its transport again once wrapped (``set_protocol``, which asyncio's
  transports take as it is). A body consumed inside ``data_received``
  (``loadgen.token_sink``) is consumed at that read's stamp.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

_ATTRIBUTE = "_prefillscope_arrivals"


class PollClock:
    """``last``: when the event loop's latest poll for I/O returned (``perf_counter``);
    ``previous``: the poll before it (that of the iteration that woke the running task)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.last = self.previous = time.perf_counter()
        self._selector = getattr(loop, "_selector", None)
        inner = getattr(self._selector, "select", None)
        self.active = callable(inner) and not hasattr(inner, "_prefillscope_poll_clock")
        if not self.active:
            return
        perf = time.perf_counter

        def select(timeout: float | None = None) -> Any:
            ready = inner(timeout)
            self.previous = self.last
            self.last = perf()
            return ready

        select._prefillscope_poll_clock = True  # type: ignore[attr-defined]
        self._selector.select = select  # type: ignore[union-attr]

    def close(self) -> None:
        """Give the selector back its own ``select``."""
        if self.active:
            del self._selector.select  # type: ignore[union-attr]
            self.active = False


class Arrivals:
    """``last``: when the connection's latest read arrived (``perf_counter``)."""

    __slots__ = ("last",)

    def __init__(self, last: float | None = None) -> None:
        self.last = time.perf_counter() if last is None else last


class ArrivalStamps:
    """Arrival stamps for the connections of one run."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.poll = PollClock(loop)

    def of(self, protocol: Any) -> Arrivals:
        """The stamps of ``protocol``'s connection (wrapped on first use, then reused).

        On first use the response's first bytes were handed over before the wrapper was
        there, in the iteration that woke the task calling this: the previous poll.
        """
        arrivals = getattr(protocol, _ATTRIBUTE, None)
        if arrivals is not None:
            return arrivals
        arrivals = Arrivals(self.poll.previous if self.poll.active else None)
        inner = protocol.data_received
        if self.poll.active:
            poll = self.poll

            def data_received(data: bytes) -> None:
                if data:
                    arrivals.last = poll.last
                inner(data)
        else:
            perf = time.perf_counter

            def data_received(data: bytes) -> None:
                if data:
                    arrivals.last = perf()
                inner(data)

        protocol.data_received = data_received
        setattr(protocol, _ATTRIBUTE, arrivals)
        transport = getattr(protocol, "transport", None)
        if transport is not None:
            transport.set_protocol(protocol)  # uvloop: take the wrapper (see above)
        return arrivals

    def for_connection(self, connection: Any) -> Arrivals:
        """The stamps of an aiohttp connection's reads (``of`` its protocol); for
        ``None``, a response whose whole body came in with its headers, stamps of now."""
        protocol = connection.protocol if connection is not None else None
        return self.of(protocol) if protocol is not None else Arrivals()

    def close(self) -> None:
        self.poll.close()
