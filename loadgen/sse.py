"""An incremental Server-Sent Events parser: bytes in, event payloads out.

Network reads cut a stream anywhere: inside a ``data:`` line, between ``\\r`` and
``\\n``, in the middle of a multi-byte character. The parser keeps what it has not
finished and emits an event only when its blank line has arrived, as the SSE standard
says (WHATWG HTML, "server-sent events"): lines end in LF, CRLF or a lone CR; ``data``
lines of one event are joined with LF; lines starting with ``:`` are comments
(keep-alive pings); an ``event:`` field names the event.

The common read of an LLM stream is exactly one ``data: {...}\\n\\n`` event, so that
case takes a fast path that costs a few byte comparisons and one slice. Payloads are
returned as ``bytes`` (decoding is left to the consumer, which often needs only a few
bytes of it); an event with an ``event:`` name other than ``message`` comes back as a
:class:`NamedEvent`, a ``bytes`` subclass that carries the name.

At the end of a stream, :meth:`SSEParser.pending_bytes` tells whether the connection
closed in the middle of an event (data received but its blank line never came), which
the caller reports as a truncated stream.

One event arriving in many reads costs time linear in its size: the unfinished event is
kept in a ``bytearray`` that reads are appended to, and only the new bytes are searched
for its end. An event longer than ``max_event_bytes`` (``--max-event-bytes``) raises
:class:`EventTooLarge` as soon as it is known to be: a server that streams one endless
event cannot make the client hold it all.
"""

from __future__ import annotations

_BOM = b"\xef\xbb\xbf"


class NamedEvent(bytes):
    """The data of an event that had an ``event:`` field other than ``message``."""

    name: str

    def __new__(cls, data: bytes, name: str) -> NamedEvent:
        obj = super().__new__(cls, data)
        obj.name = name
        return obj


#: Default cap on one event's size (``--max-event-bytes``): far above any token event.
MAX_EVENT_BYTES = 4 * 1024 * 1024


class EventTooLarge(Exception):
    """An event outgrew ``max_event_bytes`` before its end arrived."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"an event of more than {limit:,} bytes ({size:,} received)")
        self.size = size
        self.limit = limit


class SSEParser:
    """Feed it the bytes of one stream in any pieces; it returns the complete events."""

    __slots__ = ("_buf", "_cr", "_scanned", "_started", "idle", "max_event_bytes")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already searched for an event's end
        self._cr = False  # the last piece ended in CR: a following LF belongs to it
        self._started = False
        self.max_event_bytes = max_event_bytes
        #: Past the stream's first bytes and at an event boundary with nothing held back:
        #: a read that is exactly one ``data: …\n\n`` event is that event, as it is.
        self.idle = False

    def feed(self, data: bytes) -> list[bytes]:
        """Consume ``data``; return the payloads of the events it completed, in order.

        Raises :class:`EventTooLarge` when an event outgrows ``max_event_bytes``.
        """
        if (
            self.idle
            and data[:6] == b"data: "
            and data.find(b"\n") == len(data) - 2
            and data[-1] == 0x0A
            and data.find(b"\r") < 0  # not ``in``: see ``EventStream.feed``
            and len(data) <= self.max_event_bytes
        ):
            return [data[6:-2]]
        events = self._feed_general(data)
        self.idle = self._started and not self._buf and not self._cr
        return events

    def close(self) -> list[bytes]:
        """The stream has ended: a CR held back as a possible CRLF was a line end."""
        if not self._cr:
            return []
        self._cr = False
        events = self._feed_general(b"\n")
        self.idle = not self._buf
        return events

    def pending_bytes(self) -> int:
        """Bytes of an event that has started but not ended (0 at an event boundary).

        Call after :meth:`close`. Complete comment lines are not an event, so a stream
        that ends after a keep-alive ping has nothing pending.
        """
        rest = bytes(self._buf).lstrip(b"\n")
        lines = rest.split(b"\n")
        if lines[-1] == b"" and all(line[:1] == b":" for line in lines[:-1]):
            return 0
        return len(rest)

    # -- the general path --------------------------------------------------------------
    def _feed_general(self, data: bytes) -> list[bytes]:
        if not self._started:
            if not data:
                return []
            joined = bytes(self._buf) + data
            if len(joined) < len(_BOM) and _BOM.startswith(joined):
                self._buf = bytearray(joined)  # wait: this may still be a byte-order mark
                return []
            self._buf = bytearray()
            data = joined[len(_BOM) :] if joined.startswith(_BOM) else joined
            self._started = True
        buf = self._buf
        buf += self._normalise_newlines(data)
        # Only the new bytes (and the one before them) can hold the end of an event.
        end = buf.rfind(b"\n\n", max(0, self._scanned - 1))
        if end < 0:
            self._scanned = len(buf)
            if len(buf) > self.max_event_bytes:
                raise EventTooLarge(len(buf), self.max_event_bytes)
            return []
        blocks = bytes(buf[:end]).split(b"\n\n")
        del buf[: end + 2]
        self._scanned = len(buf)
        if len(buf) > self.max_event_bytes:
            raise EventTooLarge(len(buf), self.max_event_bytes)
        events: list[bytes] = []
        for block in blocks:
            if len(block) > self.max_event_bytes:
                raise EventTooLarge(len(block), self.max_event_bytes)
            event = self._parse_block(block)
            if event is not None:
                events.append(event)
        return events

    def _normalise_newlines(self, data: bytes) -> bytes:
        """CRLF and lone CR become LF; a CR at the end waits for the next piece."""
        if self._cr:
            self._cr = False
            data = b"\r" + data
        if b"\r" not in data:
            return data
        if data.endswith(b"\r"):
            self._cr = True
            data = data[:-1]
        return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")

    @staticmethod
    def _parse_block(block: bytes) -> bytes | None:
        data_lines: list[bytes] = []
        name = None
        for line in block.split(b"\n"):
            if not line or line[0] == 0x3A:  # empty, or a ':' comment
                continue
            field, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if field == b"data":
                data_lines.append(value)
            elif field == b"event":
                name = value.decode("utf-8", "replace")
        if not data_lines:
            return None  # comments only, or fields without data: nothing is dispatched
        data = b"\n".join(data_lines)
        if name and name != "message":
            return NamedEvent(data, name)
        return data
