"""Stream edge cases over real loopback sockets: an error event followed by a dropped
connection, an event beyond ``--max-event-bytes``, the SSE parser's cost on one huge
event, and a pooled connection the server closed before the request was written."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from loadgen_servers import (
    Handler,
    Server,
    _event,
    _start_stream,
    generator,
    run_against,
    specs,
)

from loadgen.adapters import adapter_for
from loadgen.arrivals import ArrivalStamps
from loadgen.exchange import ChunkTimes, Exchanger, Prepared
from loadgen.records import RequestRecord
from loadgen.sse import EventTooLarge, SSEParser
from loadgen.target import Target
from runtime.clock import RunClock

MESSAGE = "KV cache exhausted while decoding (request 7)"


async def _error_then_drop(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = await _start_stream(request)
    await resp.write(_event(1, 8, "ab", None, None))
    error = {"error": {"message": MESSAGE, "type": "InternalServerError", "code": 500}}
    await resp.write(b"data: " + json.dumps(error).encode() + b"\n\n")
    await asyncio.sleep(0.05)
    assert request.transport is not None
    request.transport.abort()  # no [DONE], no clean end: the connection just goes
    return resp


def test_an_error_event_then_a_dropped_connection_keeps_the_servers_message(tmp_path: Path):
    async def go():
        async with Server(_error_then_drop) as url:
            return await run_against(url, specs(2), tmp_path)

    _, requests, _, _ = asyncio.run(go())
    assert requests["error_kind"].tolist() == ["stream_error_event"] * 2
    assert requests["error_message"].tolist() == [MESSAGE] * 2


def _huge_event(size: int):
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = await _start_stream(request)
        payload = b'data: {"choices": [{"text": "' + b"x" * size + b'", "finish_reason": null}]}'
        for at in range(0, len(payload), 65536):  # many reads, as a network delivers it
            await resp.write(payload[at : at + 65536])
        await resp.write(b"\n\n" + _event(1, 8, "ab", "length", None) + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    return handler


@pytest.mark.parametrize(("cap", "kind"), [(1_000_000, "stream_oversize"), (4_000_000, None)])
def test_an_event_beyond_the_cap_fails_as_oversize(tmp_path: Path, cap: int, kind) -> None:
    async def go():
        async with Server(_huge_event(2_000_000)) as url:
            return await run_against(url, specs(1), tmp_path, max_event_bytes=cap)

    _, requests, _, _ = asyncio.run(go())
    row = requests.iloc[0]
    assert (row["error_kind"] if row["status"] == "error" else None) == kind
    if kind:
        assert f"more than {cap:,} bytes" in row["error_message"]


def test_the_parser_refuses_an_endless_event_as_soon_as_it_outgrows_the_cap() -> None:
    parser = SSEParser(max_event_bytes=100_000)
    parser.feed(b"data: {")
    with pytest.raises(EventTooLarge):
        for _ in range(1000):
            parser.feed(b"x" * 1000)
    assert parser.pending_bytes() <= 101_000  # it stopped holding bytes at the cap


@pytest.mark.timing
def test_the_parser_is_linear_in_the_size_of_one_event() -> None:
    """One 32 MiB event read in 16 KiB pieces. Linear work copies it a few times (well under
    a second, even on a busy machine); re-joining and re-searching the whole held event
    on every read, as before, copies about 2,048 × 16 MiB = 32 GiB (tens of seconds; 64 MiB
    took 61 s). The bound sits between the two with a wide margin on either side."""
    parser = SSEParser(max_event_bytes=64 * 2**20)
    piece = b"y" * 16384
    start = time.perf_counter()
    parser.feed(b"data: ")
    for _ in range(32 * 2**20 // len(piece)):
        parser.feed(piece)
    events = parser.feed(b"\n\n")
    elapsed = time.perf_counter() - start
    assert len(events) == 1 and len(events[0]) == 32 * 2**20
    assert elapsed < 5.0, elapsed


async def _send_in_turn(server: Server, delays: tuple[float, ...]) -> list[RequestRecord]:
    """Requests sent one after the other through one exchanger (one connection pool),
    each ``delay`` after the previous one ended."""
    async with server as url:
        clock = RunClock()
        target = Target(url, "vllm", "completions", "m", None, vocab_size=8192)
        adapter = adapter_for(target)
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            stamps = ArrivalStamps(asyncio.get_running_loop())
            exchanger = Exchanger(session, adapter, clock, timeout_s=30, stamps=stamps)
            records = []
            for spec, delay in zip(specs(len(delays)), delays, strict=True):
                prepared = Prepared(
                    json.dumps({"model": "m", "prompt": [5] * 8, "max_tokens": 4,
                                "stream": True}).encode(),
                    [5] * 8, 8, not_before=clock.now() + delay,
                )  # fmt: skip
                record = RequestRecord(spec.id)
                await exchanger.send(prepared, record, ChunkTimes())
                records.append(record)
            stamps.close()
    return records


def test_a_request_whose_pooled_connection_was_closed_before_sending_is_retried_once():
    """The server's keep-alive (0.2 s) closes the pooled connection while the request
    waits for its send time (1 s): nothing reached the server, so it goes again on a
    fresh connection and its row says so."""
    handler = generator(0.0, 0.001)
    server = Server(handler)
    server.runner = web.AppRunner(server.app, access_log=None, keepalive_timeout=0.2)
    first, second = asyncio.run(_send_in_turn(server, (0.0, 1.0)))
    assert first.ok and not first.retried
    assert second.ok and second.retried, second.error_message
    assert second.output_tokens == 4 and len(handler.bodies) == 2  # the server saw it once


def _dropping(nth_on_connection: int) -> tuple[Handler, dict[str, int]]:
    """A stream server that drops (closes with no status line) the ``nth_on_connection``
    request each connection carries, and answers every other; it counts both."""
    answer = generator(0.0, 0.001)
    carried: dict[int, int] = {}
    counts = {"dropped": 0, "answered": 0}

    async def handler(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        key = id(request.transport)
        carried[key] = carried.get(key, 0) + 1
        if carried[key] == nth_on_connection:
            counts["dropped"] += 1
            request.transport.abort()
            return web.Response()
        counts["answered"] += 1
        return await answer(request)

    return handler, counts


def test_a_reused_connection_dropped_as_the_request_left_is_retried_once():
    """The race a server's keep-alive makes: its close crosses the request on the wire, so
    the request is written onto a connection idle a while that then ends with no answer.
    Here the server drops the second request each connection carries, sent 0.4 s after
    the first was answered: it goes again, once, on a fresh connection, answered there."""
    handler, counts = _dropping(2)
    first, second, third = asyncio.run(_send_in_turn(Server(handler), (0.0, 0.4, 0.0)))
    assert first.ok and not first.retried
    assert second.ok and second.retried, second.error_message
    assert third.ok and second.output_tokens == third.output_tokens == 4
    assert counts == {"dropped": 1, "answered": 3}


@pytest.mark.parametrize("nth, delays", [(1, (0.0,)), (2, (0.0, 0.0))], ids=["fresh", "busy"])
def test_a_request_dropped_off_the_keepalive_race_is_not_sent_again(
    nth: int, delays: tuple[float, ...]
) -> None:
    """A server that drops a request on a fresh connection, or on one that answered a
    moment before, may have read it: a ``dropped`` failure, never a second send."""
    handler, counts = _dropping(nth)
    record = asyncio.run(_send_in_turn(Server(handler), delays))[-1]
    assert not record.ok and not record.retried
    assert record.error_kind == "dropped", record.error_message
    assert counts == {"dropped": 1, "answered": nth - 1}
