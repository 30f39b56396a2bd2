"""A light OpenAI-compatible SSE server that keeps its step at thousands of streams on one core.

The embedded engine (``prefillscope serve --fixed-step-ms``) models a scheduler, a KV
cache and metrics; on one core it cannot keep a 50 ms step beyond a few hundred
streams, so a client benchmark against it stops measuring the client there. This mock
does nothing but stream: one ticker, every ``step_s`` on an absolute schedule, writes
the next token event of every active stream straight to its socket (``asyncio``
transports, no framework), from event bytes encoded once per (prompt length, output
length). A request's first token goes out at the first tick after its headers were
answered, then one per tick; the last tick also carries the usage event and
``[DONE]``.

It speaks enough of vLLM's API for ``prefillscope bench`` and the benchmarks:
``GET /v1/models`` (``owned_by: vllm``, ``max_model_len``), ``GET /health``,
``POST /v1/completions`` with ``stream: true`` (continuous usage on every event: the cumulative
``completion_tokens``), HTTP/1.1 keep-alive with chunked bodies. Anything else is a 404.

Its own truth, for judging a client: every tick's due time, start and end on ``time.perf_counter``
(the system's monotonic clock, the clients' too) and how many streams it wrote,
at ``GET /mock/ticks?since=T`` (ticks that started at or after ``T``), with the step.
A stream's k-th token was written during its first tick + k − 1. And, as vLLM's
histograms hold them, the sum and count of the times from a request read whole to its
first token written and between a stream's tokens written, at ``GET /mock/totals``
(``{"ttft": [sum_s, count], "itl": [sum_s, count]}``); and per stream, the time its request
was read whole and the time its first token was written, at ``GET /mock/firsts?since=T``
(streams read at or after ``T``), for a per-request TTFT truth.

Run: ``python benchmarks/sse_mock.py [--port 0] [--step-ms 20] [--model NAME]``; the
first stdout line is ``{"url": ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

MODEL = "mock-model"
MAX_MODEL_LEN = 1 << 20
#: Largest request head and body the mock reads.
MAX_REQUEST_BYTES = 1 << 22

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def _chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _reply(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def stream_events(model: str, prompt_tokens: int, max_tokens: int) -> list[bytes]:
    """The chunks of one stream, one per tick: token ``k`` with usage ``completion_tokens
    = k``; the last with ``finish_reason: length``, the usage event, ``[DONE]`` and the
    end of the chunked body."""
    events = []
    for k in range(1, max_tokens + 1):
        last = k == max_tokens
        choice = {
            "index": 0,
            "text": " a",
            "logprobs": None,
            "finish_reason": "length" if last else None,
        }
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + k}
        usage["completion_tokens"] = k
        obj = {"id": "cmpl-mock", "object": "text_completion", "created": 0, "model": model}
        data = _event(obj | {"choices": [choice], "usage": usage})
        if last:
            tail = usage | {"prompt_tokens_details": {"cached_tokens": 0}}
            data += _event(obj | {"choices": [], "usage": tail}) + b"data: [DONE]\n\n"
            events.append(_chunk(data) + b"0\r\n\r\n")
        else:
            events.append(_chunk(data))
    return events


@dataclass
class Stream:
    transport: asyncio.Transport
    events: list[bytes]
    #: When its request was read whole, and when its latest token was written.
    received: float
    at: int = 0
    last: float = 0.0


@dataclass
class Mock:
    """The streams and the ticker; ``ticks`` holds (due, start, end, streams written)."""

    step_s: float
    model: str = MODEL
    active: list[Stream] = field(default_factory=list)
    joining: list[Stream] = field(default_factory=list)
    ticks: list[tuple[float, float, float, int]] = field(default_factory=list)
    #: [sum, count] of request-read-to-first-token-written and of token-to-token times.
    totals: dict[str, list[float]] = field(
        default_factory=lambda: {"ttft": [0.0, 0], "itl": [0.0, 0]}
    )
    #: (request read whole, first token written) of every stream, in order of first tokens.
    firsts: list[tuple[float, float]] = field(default_factory=list)
    _encoded: dict[tuple[int, int], list[bytes]] = field(default_factory=dict)

    def events(self, prompt_tokens: int, max_tokens: int) -> list[bytes]:
        key = (prompt_tokens, max_tokens)
        if key not in self._encoded:
            self._encoded[key] = stream_events(self.model, prompt_tokens, max_tokens)
        return self._encoded[key]

    async def tick_forever(self) -> None:
        due = time.perf_counter()
        while True:
            due += self.step_s
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # late: write now, and keep the absolute schedule
            self.active.extend(self.joining)
            self.joining.clear()
            if not self.active:
                continue
            start = time.perf_counter()
            alive = []
            written = 0
            ttft, itl = self.totals["ttft"], self.totals["itl"]
            for stream in self.active:
                if stream.transport.is_closing():  # the client went away
                    continue
                stream.transport.write(stream.events[stream.at])
                now = time.perf_counter()
                totals, since = (itl, stream.last) if stream.at else (ttft, stream.received)
                if not stream.at:
                    self.firsts.append((stream.received, now))
                totals[0] += now - since
                totals[1] += 1
                stream.last = now
                written += 1
                stream.at += 1
                if stream.at < len(stream.events):
                    alive.append(stream)
            self.ticks.append((due, start, time.perf_counter(), written))
            self.active = alive

    def ticks_since(self, since: float) -> dict[str, Any]:
        return {"step_s": self.step_s, "ticks": [t for t in self.ticks if t[1] >= since]}


class Connection(asyncio.Protocol):
    """HTTP/1.1, one request at a time, kept alive."""

    def __init__(self, mock: Mock) -> None:
        self.mock = mock
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_REQUEST_BYTES:
                    self._close(_reply("431 Request Header Fields Too Large", b"{}"))
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])
            }
            length = int(headers.get("content-length") or 0)
            if length > MAX_REQUEST_BYTES:
                self._close(_reply("413 Content Too Large", b"{}"))
                return
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            method, target, _ = ([*head[0].split(" "), "", ""])[:3]
            self._answer(method, target, body)

    def _close(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)
        self.transport.close()

    def _answer(self, method: str, target: str, body: bytes) -> None:
        assert self.transport is not None
        url = urlsplit(target)
        if method == "GET" and url.path == "/v1/models":
            model = {"id": self.mock.model, "object": "model", "owned_by": "vllm"}
            model["max_model_len"] = MAX_MODEL_LEN
            self.transport.write(
                _reply("200 OK", json.dumps({"object": "list", "data": [model]}).encode())
            )
        elif method == "GET" and url.path == "/mock/ticks":
            since = float(parse_qs(url.query).get("since", ["0"])[0])
            self.transport.write(
                _reply("200 OK", json.dumps(self.mock.ticks_since(since)).encode())
            )
        elif method == "GET" and url.path == "/mock/firsts":
            since = float(parse_qs(url.query).get("since", ["0"])[0])
            firsts = [f for f in self.mock.firsts if f[0] >= since]
            self.transport.write(_reply("200 OK", json.dumps(firsts).encode()))
        elif method == "GET" and url.path == "/health":
            self.transport.write(_reply("200 OK", b"{}"))
        elif method == "GET" and url.path == "/mock/totals":
            self.transport.write(_reply("200 OK", json.dumps(self.mock.totals).encode()))
        elif method == "POST" and url.path == "/v1/completions":
            self._stream(body)
        else:
            self.transport.write(_reply("404 Not Found", b'{"error":"not found"}'))

    def _stream(self, body: bytes) -> None:
        assert self.transport is not None
        received = time.perf_counter()
        try:
            request = json.loads(body)
            prompt = request.get("prompt")
            max_tokens = int(request.get("max_tokens") or 16)
            if not request.get("stream") or max_tokens < 1:
                raise ValueError("only streams of at least one token")
        except (ValueError, TypeError, AttributeError) as exc:
            error = json.dumps({"error": {"message": str(exc), "code": 400}}).encode()
            self.transport.write(_reply("400 Bad Request", error))
            return
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        self.transport.write(STREAM_HEAD)
        self.mock.joining.append(
            Stream(self.transport, self.mock.events(prompt_tokens, max_tokens), received)
        )


async def serve(mock: Mock, port: int, ready: Any = None) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(mock), "127.0.0.1", port, backlog=4096)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    ticker = asyncio.create_task(mock.tick_forever())
    if ready is not None:
        ready(url)
    try:
        await asyncio.Future()  # until cancelled
    finally:
        ticker.cancel()
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--step-ms", type=float, default=20.0, help="time between two tokens")
    parser.add_argument("--model", default=MODEL)
    args = parser.parse_args()
    gc.disable()  # nothing here makes cycles; a collection would stall every stream at once
    mock = Mock(args.step_ms / 1e3, args.model)

    def ready(url: str) -> None:
        print(json.dumps({"url": url, "step_ms": args.step_ms}), flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(mock, args.port, ready))


if __name__ == "__main__":
    main()
