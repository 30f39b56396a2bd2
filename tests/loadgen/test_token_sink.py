"""A response's body consumed inside ``data_received`` (``loadgen.token_sink``), on
asyncio's loop and on uvloop (the CLI's): each read is timed when it arrived, pieces of
one read are one row, an error while consuming reaches the request, and a sink whose
wait is over takes nothing more.

The server is a plain socket in a thread of its own, so that what it writes, and when,
does not depend on the client's loop, which the tests keep busy on purpose.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable

import aiohttp
import pytest
from loadgen_servers import _event
from loops import LOOPS, run_on

from loadgen.adapters import adapter_for
from loadgen.adapters.base import RequestParams
from loadgen.arrivals import Arrivals, ArrivalStamps
from loadgen.exchange import Exchanger, Prepared
from loadgen.records import ChunkTimes, RequestRecord, Status
from loadgen.target import Target
from loadgen.token_sink import TokenSink, read_body
from runtime.clock import RunClock

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
DONE = b"data: [DONE]\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class ScriptedServer:
    """Answers one request on 127.0.0.1 with the response head, then writes each of
    ``writes`` (raw bytes, HTTP chunk framing included) once its gate is set."""

    def __init__(self, writes: list[bytes]) -> None:
        self.writes = writes
        self.gates = [threading.Event() for _ in writes]
        self.sent = [threading.Event() for _ in writes]
        self.written_at: list[float] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(HEAD)
            for gate, sent, data in zip(self.gates, self.sent, self.writes, strict=True):
                if not gate.wait(10):
                    return
                self.written_at.append(time.perf_counter())
                conn.sendall(data)
                sent.set()
            time.sleep(0.2)  # let the client read the end before the socket closes

    def close(self) -> None:
        for gate in self.gates:
            gate.set()
        self.thread.join(5)
        self.listener.close()


def _exchanger(session: aiohttp.ClientSession, url: str, clock: RunClock, **hooks) -> Exchanger:
    target = Target(url, "vllm", "completions", "tiny-llama", vocab_size=8192)
    loop = asyncio.get_running_loop()
    return Exchanger(
        session,
        adapter_for(target, RequestParams()),
        clock,
        timeout_s=10,
        stamps=ArrivalStamps(loop),
        **hooks,
    )


def _open(server: ScriptedServer) -> Callable[[RequestRecord, ChunkTimes], None]:
    """An ``on_stream`` hook: the server's first write goes out once the client is
    reading the body (not with the response head, which the request's task reads)."""

    def on_stream(record: RequestRecord, chunks: ChunkTimes) -> None:
        asyncio.get_running_loop().call_later(0.02, server.gates[0].set)

    return on_stream


def _prepared() -> Prepared:
    return Prepared(body=b'{"prompt":[1,2,3],"max_tokens":2}', prompt=[1, 2, 3], prompt_tokens=3)


@pytest.mark.timing
@pytest.mark.parametrize("loop", LOOPS)
def test_a_read_is_timed_when_it_arrived_not_when_a_busy_loop_woke_the_request(loop) -> None:
    """Once the stream has started, the loop is kept busy: a callback asks the server for
    the first token and blocks until its bytes are in the client's socket, then queues
    a second 50 ms of work. The read is timed by the poll between the two (uvloop also
    consumes it there; asyncio's loop right after the work queued before that poll); a
    reader task woken by it would run only after the second. So the token's time is
    before the second piece of work began, whatever the machine's load."""
    last = _chunk(_event(2, 3, "b", "length", None) + DONE) + b"0\r\n\r\n"
    server = ScriptedServer([_chunk(_event(1, 3, "a", None, None)), last])
    second_began: list[float] = []

    async def main() -> tuple[RequestRecord, ChunkTimes, RunClock]:
        clock = RunClock()
        aloop = asyncio.get_running_loop()

        def second() -> None:
            second_began.append(time.perf_counter())
            time.sleep(0.05)

        def first() -> None:
            server.gates[0].set()
            server.sent[0].wait(10)  # on loopback, written is in the client's socket
            aloop.call_soon(second)
            # The last token well after the first was read: asyncio's loop reads a
            # socket after the callbacks queued before the poll, i.e. after ``second``.
            aloop.call_later(0.3, server.gates[1].set)

        def on_stream(record: RequestRecord, chunks: ChunkTimes) -> None:
            aloop.call_soon(first)

        async with aiohttp.ClientSession() as session:
            exchanger = _exchanger(session, server.url, clock, on_stream=on_stream)
            record, chunks = RequestRecord("r0"), ChunkTimes()
            await exchanger.send(_prepared(), record, chunks)
        return record, chunks, clock

    try:
        record, chunks, clock = run_on(loop, main)
    finally:
        server.close()
    assert record.status == Status.OK, record.error_message
    assert list(chunks.n_tokens) == [1, 1]
    first_token_at = clock.t0 + chunks.t_s[0]
    assert server.written_at[0] <= first_token_at < second_began[0]


@pytest.mark.parametrize("loop", LOOPS)
def test_http_chunks_that_came_in_one_read_are_one_row(loop) -> None:
    """Two events, each its own HTTP chunk, in one write: aiohttp hands them over one by
    one, and they are one read of two tokens, as one ``readany`` would have had them."""
    both = _chunk(_event(1, 3, "a", None, None)) + _chunk(_event(3, 3, "bc", None, None))
    last = _chunk(_event(4, 3, "d", "length", None) + DONE) + b"0\r\n\r\n"
    server = ScriptedServer([both, last])

    async def main() -> tuple[RequestRecord, ChunkTimes]:
        async with aiohttp.ClientSession() as session:
            exchanger = _exchanger(session, server.url, RunClock(), on_stream=_open(server))
            record, chunks = RequestRecord("r0"), ChunkTimes()
            asyncio.get_running_loop().call_later(0.15, server.gates[1].set)
            await exchanger.send(_prepared(), record, chunks)
        return record, chunks

    try:
        record, chunks = run_on(loop, main)
    finally:
        server.close()
    assert record.status == Status.OK, record.error_message
    assert list(chunks.n_tokens) == [3, 1]
    assert record.num_chunks == 2 and record.multi_token_chunks == 1
    assert chunks.t_s[1] - chunks.t_s[0] >= 0.05


@pytest.mark.parametrize("loop", LOOPS)
def test_an_error_raised_while_a_read_is_consumed_ends_the_request_with_it(loop) -> None:
    """An event beyond the size cap, found inside ``data_received``, fails the request as
    oversize (the server keeps the stream open: the error, not its end, wakes it); an
    observer's exception there reaches the run like any of its exceptions."""
    big = _chunk(b"data: {" + b'"x":"' + b"y" * 400 + b'"}\n\n')
    server = ScriptedServer([big, b"0\r\n\r\n"])
    hook = ScriptedServer([_chunk(_event(1, 3, "a", None, None)), b"0\r\n\r\n"])

    def refuse(record: RequestRecord) -> None:
        raise LookupError("observer failed")

    async def main() -> tuple[RequestRecord, BaseException | None]:
        async with aiohttp.ClientSession() as session:
            exchanger = _exchanger(
                session, server.url, RunClock(), max_event_bytes=200, on_stream=_open(server)
            )
            record = RequestRecord("r0")
            await exchanger.send(_prepared(), record, ChunkTimes())
            observed = _exchanger(
                session, hook.url, RunClock(), on_first_token=refuse, on_stream=_open(hook)
            )
            try:
                await observed.send(_prepared(), RequestRecord("r1"), ChunkTimes())
            except LookupError as exc:
                return record, exc
        return record, None

    try:
        record, raised = run_on(loop, main)
    finally:
        server.close()
        hook.close()
    assert record.status == Status.ERROR
    assert record.error_kind == "stream_oversize", record.error_message
    assert isinstance(raised, LookupError) and str(raised) == "observer failed"


class _OtherReader:
    """A body reader of another class than aiohttp's ``StreamReader``."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    def read_nowait(self) -> bytes:
        return self.pieces.pop(0)

    def is_eof(self) -> bool:
        return False

    async def readany(self) -> bytes:
        await asyncio.sleep(0)
        return self.pieces.pop(0) if self.pieces else b""


def test_a_reader_of_another_class_is_read_with_readany_into_the_same_sink() -> None:
    target = Target("http://127.0.0.1:1", "vllm", "completions", "m", vocab_size=8192)
    stream = adapter_for(target, RequestParams()).new_stream(False)
    stream.sse.feed(b"")
    chunks = ChunkTimes()
    arrivals = Arrivals(100.0)
    sink = TokenSink(stream, chunks, arrivals, 99.0, RequestRecord("r0"), None)
    reader = _OtherReader([_event(1, 3, "a", None, None), _event(2, 3, "b", None, None)])

    asyncio.run(read_body(reader, sink))
    assert list(chunks.n_tokens) == [2]  # both pieces at the same stamp: one read
    assert list(chunks.t_s) == [1.0]
    assert sink.closed
    sink.take(_event(3, 3, "c", None, None))  # a sink whose wait is over takes nothing
    assert list(chunks.n_tokens) == [2] and stream.tokens == 2
