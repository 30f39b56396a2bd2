"""One request over the wire: send it, time every read of its stream, classify its end.

``sent_s`` is the moment the request's bytes are handed to the socket (the body payload
stamps it as aiohttp writes it, headers coalesced with it), not the moment the request
was started: taking a pooled or new connection and, before Python 3.12, a loop
iteration for aiohttp's body-writer task come first — a millisecond or more under load,
which would otherwise be counted in every TTFT "from the actual send" as server time. A
request whose bytes never went out (refused connection) keeps the time it was started.

The read loop is the client's hot path, run once per network read of every stream:
an ``await`` on aiohttp's buffer, the read's arrival stamp (:mod:`loadgen.arrivals`),
the adapter's byte-level parse and two appends to typed arrays (no Python object per
token). Everything else (the record's fields, the error class) is settled once, when
the request ends.

Error classes (``ErrorKind``), by what the server did:

* ``connect``: no response at all: refused, reset or closed before a status line;
* ``timeout``: the per-request timeout expired (stalled before or during the stream);
* ``http_429`` / ``http_4xx`` / ``http_5xx``: an error status (message from its body);
* ``stream_error_event``: the stream itself carried an error event;
* ``stream_malformed``: an event whose payload is not a JSON object (or no SSE at all);
* ``stream_truncated``: the connection ended before the stream's end-of-stream event,
  between events or mid-event;
* ``stream_oversize``: one event outgrew ``--max-event-bytes`` (the SSE parser's cap);
* ``cancelled``: the run was cancelled (Ctrl-C) while the request was in flight.

What the stream said wins over how it ended: an error event followed by a dropped
connection is ``stream_error_event`` with the server's message, not a truncation.

A request whose pooled connection the server closed (its keep-alive ran out) before a
byte of the request was written never reached the server: it is sent again, once, on a
fresh connection, and its row says ``retried``. Open-loop requests take their connection
ahead of their send time, which is what opens that window.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from aiohttp.payload import BytesPayload

from loadgen.adapters.base import Adapter, EventStream, error_message, short
from loadgen.arrivals import ArrivalStamps
from loadgen.records import ChunkTimes, ErrorKind, RequestRecord, Status
from loadgen.sse import MAX_EVENT_BYTES, EventTooLarge
from runtime.clock import RunClock
from runtime.timing import Waker

#: The most of an error response body that is read to find its message.
ERROR_BODY_LIMIT = 64 * 1024


@dataclass
class Prepared:
    """A request ready to go: its encoded body and what is needed to read its answer."""

    body: bytes
    prompt: list[int] | str
    prompt_tokens: int | None
    want_ids: bool = False
    want_text: bool = False
    #: Run time before which the body must not be written (an open-loop send time).
    not_before: float | None = None


class Failure(Exception):
    """A request ended badly; carries its error class and a short message."""

    def __init__(self, kind: ErrorKind, message: str, http_status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = short(message)
        self.http_status = http_status


class _StampedBody(BytesPayload):
    """A request body written no earlier than its send time, stamping ``record.sent_s``.

    aiohttp buffers a request's headers and sends them with the first body bytes, so by
    holding the body until ``not_before`` the whole request leaves at its send time while
    everything before it (connection from the pool, URL and header handling, the request
    task's start-up) happened ahead of time. Without the hold that set-up, about a
    millisecond of client CPU and any event-loop backlog, was dispatch lag in every
    open-loop request. ``on_stamp`` runs once the request is released (the observer's
    ``on_send``), so what it sees is the real send time, never the preparation's.
    """

    def __init__(
        self,
        body: bytes,
        record: RequestRecord,
        clock: RunClock,
        not_before: float | None,
        waker: Waker,
        on_stamp: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(body, content_type="application/json")
        self._record = record
        self._clock = clock
        self._not_before = not_before
        self._waker = waker
        #: The request's bytes (headers ride with the body's) went to the socket.
        self.written = False
        self._on_stamp = on_stamp

    async def _stamp(self, writer: Any) -> None:
        if self._not_before is not None:
            await self._waker.until(self._not_before)
        self._record.sent_s = self._clock.now()
        # A transport the server already closed drops what is written to it.
        transport = getattr(writer, "transport", None)
        self.written = transport is not None and not transport.is_closing()
        if self._on_stamp is not None:
            self._on_stamp()

    async def write(self, writer: Any) -> None:
        await self._stamp(writer)
        await super().write(writer)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        await self._stamp(writer)
        await super().write_with_length(writer, content_length)


StreamHook = Callable[[RequestRecord, ChunkTimes], None]
RecordHook = Callable[[RequestRecord], None]


class Exchanger:
    """Sends requests of one adapter through one aiohttp session."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        adapter: Adapter,
        clock: RunClock,
        *,
        timeout_s: float | None,
        stamps: ArrivalStamps,
        on_send: RecordHook | None = None,
        on_first_token: RecordHook | None = None,
        on_stream: StreamHook | None = None,
        waker: Waker | None = None,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self.session = session
        self.max_event_bytes = max_event_bytes
        self.waker = waker or Waker(clock.now)
        self.adapter = adapter
        self.clock = clock
        self.timeout_s = timeout_s
        self.stamps = stamps
        self.url = adapter.target.url(adapter.path)
        self.headers = adapter.target.headers()
        self.on_send = on_send
        self.on_first_token = on_first_token
        self.on_stream = on_stream

    async def send(
        self, prepared: Prepared, record: RequestRecord, chunks: ChunkTimes
    ) -> EventStream:
        """Send one request, filling ``record`` and ``chunks``; raises only on cancellation.

        Returns the stream reader (what the server returned, for a session's next turn).

        On cancellation the record is completed as ``cancelled`` before the
        ``CancelledError`` propagates, so the caller can still write it.
        """
        stream = self.adapter.new_stream(prepared.want_ids, prepared.want_text)
        stream.sse.max_event_bytes = self.max_event_bytes
        state = _Progress()
        record.sent_s = self.clock.now()  # until the body is released (or never is)
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._exchange_or_retry(prepared, record, stream, chunks, state)
            failure = _stream_failure(stream)
        except EventTooLarge as exc:
            failure = Failure(ErrorKind.STREAM_OVERSIZE, f"{exc} (raise --max-event-bytes)")
        except TimeoutError:
            failure = Failure(ErrorKind.TIMEOUT, _timeout_message(self.timeout_s, state, stream))
        except asyncio.CancelledError:
            _finish(record, stream, chunks, prepared, self.clock.now(), state.last_s)
            fail_record(record, Failure(ErrorKind.CANCELLED, "run cancelled while in flight"))
            raise
        except Failure as exc:
            failure = exc
        except (aiohttp.ClientError, OSError) as exc:
            if stream.done or stream.error or stream.malformed:  # what the stream said wins
                failure = _stream_failure(stream)
            elif state.streaming:
                failure = _truncated(stream, _reason(exc))
            else:
                failure = Failure(ErrorKind.CONNECT, _reason(exc))
        state.released()  # if never released (a refused connection): tried all the same
        _finish(record, stream, chunks, prepared, self.clock.now(), state.last_s)
        if failure is not None:
            fail_record(record, failure)
        return stream

    async def _exchange_or_retry(
        self,
        prepared: Prepared,
        record: RequestRecord,
        stream: EventStream,
        chunks: ChunkTimes,
        state: _Progress,
    ) -> None:
        """The exchange; once more on a fresh connection when the pooled one was closed
        before any byte of the request reached the server."""
        try:
            await self._exchange(prepared, record, stream, chunks, state, self.session)
        except aiohttp.ClientConnectorError:
            raise  # a new connection that could not be opened: nothing to retry on
        except (aiohttp.ClientError, OSError):
            if state.streaming or state.body is None or state.body.written:
                raise
            record.retried = True
            if prepared.not_before is not None:  # connect when due: an idle one may go too
                await self.waker.until(prepared.not_before)
                prepared = replace(prepared, not_before=None)
            connector = aiohttp.TCPConnector(force_close=True)
            async with aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None),
                auto_decompress=False,
            ) as fresh:
                await self._exchange(prepared, record, stream, chunks, state, fresh)

    async def _exchange(
        self,
        prepared: Prepared,
        record: RequestRecord,
        stream: EventStream,
        chunks: ChunkTimes,
        state: _Progress,
        session: aiohttp.ClientSession,
    ) -> None:
        if self.on_send is not None:
            on_send = self.on_send
            state.announce = lambda: on_send(record)
        body = _StampedBody(
            prepared.body, record, self.clock, prepared.not_before, self.waker, state.released
        )
        state.body = body
        async with session.post(self.url, data=body, headers=self.headers) as resp:
            record.http_status = resp.status
            if resp.status >= 400:
                raise await _http_failure(resp)
            content_type = resp.headers.get("Content-Type", "")
            if "event-stream" not in content_type:
                raise Failure(
                    ErrorKind.STREAM_MALFORMED,
                    f"expected a text/event-stream answer, got {content_type or 'no type'}",
                )
            state.streaming = True
            if self.on_stream is not None:
                self.on_stream(record, chunks)
            # The hot loop, one pass per network read (see the module docstring).
            arrivals = self.stamps.for_connection(resp.connection)
            read = resp.content.readany
            feed = stream.feed
            t0 = self.clock.t0
            times, counts = chunks.t_s, chunks.n_tokens
            on_first = self.on_first_token
            t = self.clock.now()
            while True:
                data = await read()
                if not data:
                    break
                t = arrivals.last - t0
                n = feed(data)
                if n > 0:
                    if on_first is not None and not times:
                        record.first_token_s = t
                        on_first(record)
                    times.append(t)
                    counts.append(n)
                state.last_s = t
            n = stream.close()
            if n > 0:
                times.append(t)
                counts.append(n)


class _Progress:
    """How far a request got: whether its stream started, when data last arrived."""

    __slots__ = ("announce", "announced", "body", "last_s", "streaming")

    def __init__(self) -> None:
        self.streaming = False
        self.last_s: float | None = None
        self.body: _StampedBody | None = None
        self.announced = False
        self.announce: Callable[[], None] = _nothing

    def released(self) -> None:
        """The request left: tell the observer (once, even if aiohttp writes twice)."""
        if not self.announced:
            self.announced = True
            self.announce()


def _nothing() -> None:
    pass


async def _http_failure(resp: aiohttp.ClientResponse) -> Failure:
    body = await resp.content.read(ERROR_BODY_LIMIT)
    try:
        message = error_message(json.loads(body))
    except ValueError:
        message = short(body.decode("utf-8", "replace")) or resp.reason or ""
    return Failure(ErrorKind.for_status(resp.status), f"HTTP {resp.status}: {message}", resp.status)


def _stream_failure(stream: EventStream) -> Failure | None:
    """The error class of a stream that ended, or ``None`` when it ended properly."""
    if stream.error is not None:
        return Failure(ErrorKind.STREAM_ERROR_EVENT, stream.error)
    if stream.malformed is not None:
        return Failure(ErrorKind.STREAM_MALFORMED, stream.malformed)
    if not stream.done:
        return _truncated(stream)
    return None


def _truncated(stream: EventStream, cause: str | None = None) -> Failure:
    """The connection ended before the end-of-stream event: where, and after how much."""
    pending = stream.sse.pending_bytes()
    where = f"mid-event ({pending} bytes of it)" if pending else "between events"
    because = f" ({cause})" if cause else ""
    return Failure(
        ErrorKind.STREAM_TRUNCATED,
        f"connection closed {where} after {stream.tokens} tokens, "
        f"before the end-of-stream event{because}",
    )


def _timeout_message(timeout_s: float | None, state: _Progress, stream: EventStream) -> str:
    if not state.streaming:
        return f"no response within {timeout_s:g} s"
    return f"stream unfinished after {timeout_s:g} s ({stream.tokens} tokens received)"


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _finish(
    record: RequestRecord,
    stream: EventStream,
    chunks: ChunkTimes,
    prepared: Prepared,
    now_s: float,
    last_data_s: float | None,
) -> None:
    """Fill the record from what the stream reported and when its chunks arrived."""
    counts = chunks.n_tokens
    record.first_token_s = chunks.t_s[0] if counts else None
    record.end_s = last_data_s if stream.done and last_data_s is not None else now_s
    record.num_chunks = len(counts)
    record.multi_token_chunks = len(counts) - counts.count(1)
    record.token_count_method = stream.method
    record.finish_reason = stream.finish_reason
    record.cached_tokens = stream.cached_tokens
    reported = stream.prompt_tokens
    record.prompt_tokens = reported if reported is not None else prepared.prompt_tokens
    record.output_tokens = (
        stream.completion_tokens if stream.completion_tokens is not None else stream.tokens
    )
    record.output_token_ids = stream.token_ids
    record.output_logprobs = stream.logprobs
    record.status = Status.OK


def fail_record(record: RequestRecord, failure: Failure) -> None:
    """Mark ``record`` failed with ``failure``'s class, message and HTTP status."""
    record.status = Status.ERROR
    record.error_kind = failure.kind
    record.error_message = failure.message
    if failure.http_status is not None:
        record.http_status = failure.http_status
