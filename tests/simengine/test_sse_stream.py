"""``simengine.sse_stream``: one request's SSE events as the engine's steps produce them,
read back through the load generator's own SSE parser."""

from __future__ import annotations

import asyncio
import json

from loadgen.sse import SSEParser
from perfmodel.config import EngineConfig
from simengine.core import EngineCore, RequestUpdate, TokenOut
from simengine.metrics import RequestLatency, ServerMetrics
from simengine.openai_api import ServedModel, parse_completion
from simengine.openai_responses import ResponseShaper
from simengine.sse_stream import MAX_BUFFERED_BYTES, SseStream
from simengine.tokenizer import FIRST_WORD_ID, Tokenizer

SERVED = ServedModel("tiny", 4096, Tokenizer(32000))
CONFIG = EngineConfig()


class Connection(asyncio.Transport):
    """The bytes a response wrote, and a write buffer the test can fill."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self.buffered = 0
        self.closing = False

    def write(self, data) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.buffered


def _stream(loop: asyncio.AbstractEventLoop, interval: int) -> SseStream:
    req = parse_completion({"prompt": [300, 301], "stream": True}, SERVED)
    shaper = ResponseShaper(req, created=1, model="tiny", tokenizer=SERVED.tokenizer,
                            fingerprint="fp")  # fmt: skip
    latency = RequestLatency(ServerMetrics(EngineCore(CONFIG), CONFIG), loop.time())
    return SseStream(shaper, latency, loop, interval)


def _step(n: int, finished: bool = False) -> RequestUpdate:
    tokens = [TokenOut(FIRST_WORD_ID + i, -0.1) for i in range(n)]
    return RequestUpdate("r", tokens, 0, finished, "length" if finished else None)


def _dechunk(body: bytes) -> bytes:
    out, rest = bytearray(), body
    while rest:
        size_text, rest = rest.split(b"\r\n", 1)
        size = int(size_text, 16)
        out += rest[:size]
        assert rest[size : size + 2] == b"\r\n"
        rest = rest[size + 2 :]
    return bytes(out)


def _texts(events: list[bytes]) -> list[str | None]:
    return [None if e == b"[DONE]" else json.loads(e)["choices"][0]["text"] for e in events]


def test_first_token_at_once_then_groups_of_the_interval_and_the_rest_with_the_finish():
    async def run() -> tuple[list[bytes], bool]:
        loop = asyncio.get_running_loop()
        stream, conn = _stream(loop, interval=3), Connection()
        stream.attach(conn, chunked=True)
        for update in (_step(1), _step(1), _step(1), _step(1), _step(1), _step(1, True)):
            stream.put_nowait(update)
        return SSEParser().feed(_dechunk(bytes(conn.data))), await stream.done

    events, done = asyncio.run(run())
    word = SERVED.tokenizer.decode
    texts = _texts(events)
    assert done is True and texts[-1] is None
    # 6 tokens: 1 at once, then 3 together, then the last 2 with the finish (+ usage-less end)
    content = [t for t in texts if t]
    assert content == [word([FIRST_WORD_ID]), word([FIRST_WORD_ID] * 3), word([FIRST_WORD_ID] * 2)]
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"


def test_events_before_the_headers_are_held_and_an_http10_body_is_not_chunked():
    async def run() -> bytes:
        loop = asyncio.get_running_loop()
        stream, conn = _stream(loop, interval=1), Connection()
        stream.put_nowait(_step(2))
        stream.put_nowait(_step(1, True))
        stream.attach(conn, chunked=False)
        assert await stream.done
        return bytes(conn.data)

    body = asyncio.run(run())
    assert body.startswith(b"data: ") and body.endswith(b"data: [DONE]\n\n")
    assert len(_texts(SSEParser().feed(body))) == 3


def test_a_client_that_stops_reading_or_goes_away_ends_the_stream_as_failed():
    async def run(conn: Connection) -> bool:
        stream = _stream(asyncio.get_running_loop(), interval=1)
        stream.attach(conn, chunked=True)
        stream.put_nowait(_step(1))
        return await stream.done

    full = Connection()
    full.buffered = MAX_BUFFERED_BYTES + 1
    gone = Connection()
    gone.closing = True
    assert asyncio.run(run(full)) is False and not full.data
    assert asyncio.run(run(gone)) is False


def test_an_engine_error_is_one_error_event_then_done():
    async def run() -> list[bytes]:
        stream, conn = _stream(asyncio.get_running_loop(), interval=1), Connection()
        stream.attach(conn, chunked=True)
        stream.put_nowait(RequestUpdate("r", [], 0, error="prompt too long"))
        assert await stream.done
        return SSEParser().feed(_dechunk(bytes(conn.data)))

    error, done = asyncio.run(run())
    assert json.loads(error)["error"]["message"] == "prompt too long" and done == b"[DONE]"
