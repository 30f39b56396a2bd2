"""One request over the wire: send it, time every read of its stream, classify its end.

``sent_s`` is the moment the request's bytes are handed to the socket (the body payload
stamps it as aiohttp writes it, headers coalesced with it), not the moment the request
was started: taking a pooled or new connection and, before Python 3.12, a loop
iteration for aiohttp's body-writer task come first — a millisecond or more under load,
which would otherwise be counted in every TTFT "from the actual send" as server time. A
request whose bytes never went out (refused connection) keeps the time it was started.

The client's hot path runs once per network read of every stream, inside the
connection's ``data_received`` (:mod:`loadgen.token_sink`; the request's task sleeps
until the stream ends): the read's arrival stamp (:mod:`loadgen.arrivals`), the
adapter's byte-level parse and two appends to typed arrays (no Python object per token).
Everything else (the record's fields, the error class) is settled once, when the
request ends.

How a request ended badly is classified in ``loadgen.failures``.

A request whose pooled connection the server closed (its keep-alive ran out) before a
byte of the request was written never reached the server: it is sent again, once, on a
fresh connection, and its row says ``retried``. Open-loop requests take their connection
ahead of their send time, which is what opens that window. So is a request written onto
a connection idle for ``KEEPALIVE_IDLE_S`` or more since its last answer that is then
reset or closed with no answer: the server's keep-alive ran out as the request left, its
close and our write crossing on the wire (now and then, at a rate whose gaps are near a
server's keep-alive timeout: uvicorn's, vLLM's, is 5 s). A request dropped on a fresh
connection, or on one in use a moment before, is a ``connect`` failure, never sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from aiohttp.payload import BytesPayload

from loadgen.adapters.base import Adapter, EventStream, TokenIds
from loadgen.arrivals import ArrivalStamps
from loadgen.failures import (
    Failure,
    dropped_unanswered,
    fail_record,
    http_failure,
    reason,
    stream_failure,
    truncated,
)
from loadgen.records import ChunkTimes, ErrorKind, RequestRecord, Status, usage_suspect
from loadgen.sse import MAX_EVENT_BYTES, EventTooLarge
from loadgen.token_sink import TokenSink, read_body
from runtime.clock import RunClock
from runtime.timing import Waker

#: A reused connection idle this long before a request that it then drops unanswered is
#: taken to have crossed the server's keep-alive close: servers keep idle connections for
#: seconds (uvicorn 5 s, nginx 75 s), not for the moment between two requests of a run.
KEEPALIVE_IDLE_S = 0.25


@dataclass
class Prepared:
    """A request ready to go: its encoded body and what is needed to read its answer."""

    body: bytes
    prompt: TokenIds | str
    prompt_tokens: int | None
    want_ids: bool = False
    want_text: bool = False
    #: Run time before which the body must not be written (an open-loop send time).
    not_before: float | None = None


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
        on_stamp: Callable[[], None],
        carried: ConnectionTimes,
    ) -> None:
        super().__init__(body, content_type="application/json")
        self._record = record
        self._clock = clock
        self._not_before = not_before
        self._waker = waker
        #: The request's bytes (headers ride with the body's) went to the socket.
        self.written = False
        #: The connection it went onto (its protocol), and how long that had been idle
        #: since it last answered (``carried``: when each connection last did), if it
        #: ever had.
        self.connection: Any = None
        self.idle_s: float | None = None
        self._carried = carried
        self._on_stamp = on_stamp

    async def _stamp(self, writer: Any) -> None:
        if self._not_before is not None:
            await self._waker.until(self._not_before)
        self._record.sent_s = self._clock.now()
        # A transport the server already closed drops what is written to it.
        transport = getattr(writer, "transport", None)
        self.written = transport is not None and not transport.is_closing()
        if self.written:
            self.connection = getattr(writer, "protocol", None)
            answered = self._carried.get(self.connection)
            self.idle_s = None if answered is None else self._record.sent_s - answered
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
        #: When each open connection last finished an answer: its idle time at reuse.
        self.carried = ConnectionTimes()

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
            failure = stream_failure(stream)
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
                failure = stream_failure(stream)
            elif state.streaming:
                failure = truncated(stream, reason(exc))
            elif dropped_unanswered(exc, record):  # sent, then closed or reset unanswered
                failure = Failure(ErrorKind.DROPPED, reason(exc))
            else:
                failure = Failure(ErrorKind.CONNECT, reason(exc))
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
        before any byte of the request reached the server, or was reset or closed with no
        answer just as a request that it was reused for left (see the module docstring)."""
        try:
            await self._exchange(prepared, record, stream, chunks, state, self.session)
        except aiohttp.ClientConnectorError:
            raise  # a new connection that could not be opened: nothing to retry on
        except (aiohttp.ClientError, OSError) as exc:
            body = state.body
            if state.streaming or body is None:
                raise
            idle = body.idle_s
            raced = idle is not None and idle >= KEEPALIVE_IDLE_S
            if body.written and not (raced and dropped_unanswered(exc, record)):
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
            prepared.body,
            record,
            self.clock,
            prepared.not_before,
            self.waker,
            state.released,
            self.carried,
        )
        state.body = body
        async with session.post(self.url, data=body, headers=self.headers) as resp:
            record.http_status = resp.status
            if resp.status >= 400:
                raise await http_failure(resp)
            content_type = resp.headers.get("Content-Type", "")
            if "event-stream" not in content_type:
                raise Failure(
                    ErrorKind.STREAM_MALFORMED,
                    f"expected a text/event-stream answer, got {content_type or 'no type'}",
                )
            state.streaming = True
            if self.on_stream is not None:
                self.on_stream(record, chunks)
            sink = TokenSink(
                stream,
                chunks,
                self.stamps.for_connection(resp.connection),
                self.clock.t0,
                record,
                self.on_first_token,
            )
            state.sink = sink
            await read_body(resp.content, sink)
            if body.connection is not None:
                self.answered(body.connection)

    def answered(self, connection: Any) -> None:
        """A connection of the pool (its protocol) finished an answer now (a request's,
        or one opened ahead of the run)."""
        self.carried.set(connection, self.clock.now())


class ConnectionTimes:
    """A run-time value per open connection, forgotten with the connection.

    Keyed by the connection's protocol (aiohttp's, which can be weakly referenced), not
    its transport: uvloop's TLS transport cannot be, and keying by it failed every
    request to an ``https://`` endpoint on the CLI's loop. A connection that cannot be
    keyed has no value (its idle time at reuse is unknown).
    """

    __slots__ = ("_times",)

    def __init__(self) -> None:
        self._times: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def get(self, connection: Any) -> float | None:
        try:
            return self._times.get(connection)
        except TypeError:
            return None

    def set(self, connection: Any, t_s: float) -> None:
        with contextlib.suppress(TypeError):
            self._times[connection] = t_s


class _Progress:
    """How far a request got: whether its stream started, when data last arrived."""

    __slots__ = ("announce", "announced", "body", "sink", "streaming")

    def __init__(self) -> None:
        self.streaming = False
        self.sink: TokenSink | None = None
        self.body: _StampedBody | None = None
        self.announced = False
        self.announce: Callable[[], None] = _nothing

    @property
    def last_s(self) -> float | None:
        """When data last arrived (run time), if any did."""
        return None if self.sink is None else self.sink.last_s

    def released(self) -> None:
        """The request left: tell the observer (once, even if aiohttp writes twice)."""
        if not self.announced:
            self.announced = True
            self.announce()


def _nothing() -> None:
    pass


def _timeout_message(timeout_s: float | None, state: _Progress, stream: EventStream) -> str:
    if not state.streaming:
        return f"no response within {timeout_s:g} s"
    return f"stream unfinished after {timeout_s:g} s ({stream.tokens} tokens received)"


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
    record.usage_suspect = usage_suspect(
        stream.prompt_tokens,
        stream.completion_tokens,
        stream.cached_tokens,
        stream.tokens,
        stream.method,
    )
    record.output_token_ids = stream.token_ids
    record.output_logprobs = stream.logprobs
    record.status = Status.OK
