"""How a request ended badly: its error class (``ErrorKind``) and the server's message.

Error classes (``ErrorKind``), by what the server did:

* ``connect``: no connection: refused, unreachable, or a name that does not resolve;
* ``dropped``: the request was sent, and the connection was closed or reset before a
  status line came back (a server that died, or a proxy that gave up);
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
"""

from __future__ import annotations

import errno
import json

import aiohttp

from loadgen.adapters.base import EventStream, error_message, short
from loadgen.records import ErrorKind, RequestRecord, Status

#: The most of an error response body that is read to find its message.
ERROR_BODY_LIMIT = 64 * 1024


class Failure(Exception):
    """A request ended badly; carries its error class and a short message."""

    def __init__(self, kind: ErrorKind, message: str, http_status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = short(message)
        self.http_status = http_status


def dropped_unanswered(exc: BaseException, record: RequestRecord) -> bool:
    """The connection was closed or reset before a status line came back."""
    if record.http_status is not None:
        return False
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return True
    return isinstance(exc, aiohttp.ClientOSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE)


async def http_failure(resp: aiohttp.ClientResponse) -> Failure:
    """An error status, with the message of its body (the server's own words)."""
    body = await resp.content.read(ERROR_BODY_LIMIT)
    try:
        message = error_message(json.loads(body))
    except ValueError:
        message = short(body.decode("utf-8", "replace")) or resp.reason or ""
    return Failure(ErrorKind.for_status(resp.status), f"HTTP {resp.status}: {message}", resp.status)


def stream_failure(stream: EventStream) -> Failure | None:
    """The error class of a stream that ended, or ``None`` when it ended properly."""
    if stream.error is not None:
        return Failure(ErrorKind.STREAM_ERROR_EVENT, stream.error)
    if stream.malformed is not None:
        return Failure(ErrorKind.STREAM_MALFORMED, stream.malformed)
    if not stream.done:
        return truncated(stream)
    return None


def truncated(stream: EventStream, cause: str | None = None) -> Failure:
    """The connection ended before the end-of-stream event: where, and after how much."""
    pending = stream.sse.pending_bytes()
    where = f"mid-event ({pending} bytes of it)" if pending else "between events"
    because = f" ({cause})" if cause else ""
    return Failure(
        ErrorKind.STREAM_TRUNCATED,
        f"connection closed {where} after {stream.tokens} tokens, "
        f"before the end-of-stream event{because}",
    )


def reason(exc: BaseException) -> str:
    """An exception as one line: its class and what it says."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def fail_record(record: RequestRecord, failure: Failure) -> None:
    """Mark ``record`` failed with ``failure``'s class, message and HTTP status."""
    record.status = Status.ERROR
    record.error_kind = failure.kind
    record.error_message = failure.message
    if failure.http_status is not None:
        record.http_status = failure.http_status
