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


class SSEParser:
    """Feed it the bytes of one stream in any pieces; it returns the complete events."""

    __slots__ = ("_buf", "_cr", "_started", "idle")

    def __init__(self) -> None:
        self._buf = b""
        self._cr = False  # the last piece ended in CR: a following LF belongs to it
        self._started = False
        #: Past the stream's first bytes and at an event boundary with nothing held back:
        #: a read that is exactly one ``data: …\n\n`` event is that event, as it is.
        self.idle = False

    def feed(self, data: bytes) -> list[bytes]:
        """Consume ``data``; return the payloads of the events it completed, in order."""
        if (
            self.idle
            and data.startswith(b"data: ")
            and data.find(b"\n") == len(data) - 2
            and data[-1] == 0x0A
            and b"\r" not in data
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
        rest = self._buf.lstrip(b"\n")
        lines = rest.split(b"\n")
        if lines[-1] == b"" and all(line[:1] == b":" for line in lines[:-1]):
            return 0
        return len(rest)

    # -- the general path --------------------------------------------------------------
    def _feed_general(self, data: bytes) -> list[bytes]:
        if not self._started:
            if not data:
                return []
            joined = self._buf + data
            if len(joined) < len(_BOM) and _BOM.startswith(joined):
                self._buf = joined  # wait: this may still be a byte-order mark
                return []
            self._buf = b""
            data = joined[len(_BOM) :] if joined.startswith(_BOM) else joined
            self._started = True
        data = self._normalise_newlines(data)
        buf = self._buf + data if self._buf else data
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        events: list[bytes] = []
        for block in blocks:
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
