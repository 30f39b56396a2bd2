"""Reads are stamped when the loop's poll reported them, not when a busy loop got to them."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from loadgen.arrivals import ArrivalStamps


class Reader(asyncio.Protocol):
    def __init__(self) -> None:
        self.handled_at: list[float] = []

    def data_received(self, data: bytes) -> None:
        self.handled_at.append(time.perf_counter())


@pytest.mark.timing
def test_a_busy_loop_does_not_delay_the_stamp() -> None:
    async def go() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        stamps = ArrivalStamps(loop)
        ours, theirs = socket.socketpair()
        transport, reader = await loop.create_connection(Reader, sock=ours)
        arrivals = stamps.of(reader)
        sent_at: list[float] = []

        def busy(rounds: int) -> None:
            if rounds == 2:  # the bytes are in before the loop polls again ...
                theirs.send(b"x")
                sent_at.append(time.perf_counter())
            time.sleep(0.02)  # ... and work queued before them takes 20 ms each iteration
            if rounds:
                loop.call_soon(busy, rounds - 1)

        loop.call_soon(busy, 2)
        while not reader.handled_at:
            await asyncio.sleep(0.005)
        transport.close()
        theirs.close()
        selector = loop._selector  # type: ignore[attr-defined]
        assert "select" in vars(selector)
        stamps.close()
        assert "select" not in vars(selector)  # the loop's own select is back
        return sent_at[0], arrivals.last, reader.handled_at[0]

    sent, stamped, handled = asyncio.run(go())
    assert sent < stamped
    # the poll saw the bytes after the first 20 ms of work; the handler ran 20 ms later
    assert handled - stamped > 0.015
    assert stamped - sent < handled - sent - 0.015
