"""A response's body consumed where aiohttp's parser hands it over, not by a task woken per read.

aiohttp's way to read a stream is a task awaiting ``StreamReader.readany``: each network
read is appended to the reader's buffer, a future is resolved, the task is woken in the
next iteration of the loop and pops the bytes. That round trip costs more client CPU than
everything done with the bytes afterwards: the bare aiohttp reader of
``benchmarks/loadgen_overhead.py`` spent 28-34 µs a token, the same reader fed from the
parser's hand-over 16-18 µs (64 streams, one event a read, alternated in one process).

So while a response is read to its end its ``StreamReader`` is switched (``__class__``)
to :class:`_SinkReader`, a subclass with no state of its own whose ``feed_data`` gives
each piece of the body straight to the request's :class:`TokenSink`, inside the
connection's ``data_received``; the request's task sleeps until the end of the stream
(``wait_eof``), once. aiohttp calls ``feed_data`` once per HTTP chunk (an SSE server
sends an event per chunk), so pieces that came in one network read carry that read's
stamp (``loadgen.arrivals``) and are kept as one row, as one ``readany`` would have
returned them.

Nothing about a stream's end changes: the end of the body (``feed_eof``), a dropped
connection (``set_exception``) and a cancelled wait reach the task as they reach
``readany``. An error raised while a piece is consumed (an event over the size cap, an
observer's exception) is set on the reader, which raises it in the waiting task. Once the
wait is over, by any path, the sink takes nothing more: a late piece cannot touch a
record already finished. A reader of any other class (a body-less response's) is read
with ``readany``, into the same sink.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp.streams import StreamReader

from loadgen.adapters.base import EventStream
from loadgen.arrivals import Arrivals
from loadgen.records import ChunkTimes, RequestRecord

_SINK = "_prefillscope_sink"


class TokenSink:
    """Consumes one response's body: tokens per read, stamped with the read's arrival.

    ``last_s``: run time of the latest read (token-bearing or not), ``None`` before one.
    """

    __slots__ = (
        "_arrivals",
        "_counts",
        "_feed",
        "_on_first",
        "_record",
        "_t0",
        "_times",
        "closed",
        "last_s",
        "stream",
    )

    def __init__(
        self,
        stream: EventStream,
        chunks: ChunkTimes,
        arrivals: Arrivals,
        t0: float,
        record: RequestRecord,
        on_first: Callable[[RequestRecord], None] | None,
    ) -> None:
        self.stream = stream
        self._feed = stream.feed
        self._times = chunks.t_s
        self._counts = chunks.n_tokens
        self._arrivals = arrivals
        self._t0 = t0
        self._record = record
        self._on_first = on_first
        self.last_s: float | None = None
        self.closed = False

    def take(self, data: bytes) -> None:
        """A piece of the body that arrived at the connection's latest stamp."""
        if self.closed:
            return
        t = self._arrivals.last - self._t0
        n = self._feed(data)
        if n > 0:
            times = self._times
            if times and times[-1] == t:  # another HTTP chunk of the same network read
                self._counts[-1] += n
            else:
                if not times and self._on_first is not None:
                    self._record.first_token_s = t
                    self._on_first(self._record)
                times.append(t)
                self._counts.append(n)
        self.last_s = t

    def close(self) -> None:
        """The body ended: tokens the parser held back count at the last read."""
        n = self.stream.close()
        if n > 0 and self.last_s is not None:  # held-back bytes came in a read
            self._times.append(self.last_s)
            self._counts.append(n)


class _SinkReader(StreamReader):
    """A ``StreamReader`` whose pieces go to its connection's sink instead of its buffer."""

    __slots__ = ()

    def feed_data(self, data: bytes, size: int = 0) -> bool:
        sink: TokenSink = getattr(self._protocol, _SINK)
        self.total_bytes += len(data)
        try:
            sink.take(data)
        except Exception as exc:  # raised in the waiting task, as the reader's error
            sink.closed = True
            self.set_exception(exc)
        return False  # nothing is buffered: the parser need not pause

    def begin_http_chunk_receiving(self) -> None:
        """Chunk boundaries are kept for ``readchunk``, which nobody calls here."""

    def end_http_chunk_receiving(self) -> None:
        """See :meth:`begin_http_chunk_receiving`."""


async def read_body(content: Any, sink: TokenSink) -> None:
    """Give ``content``'s body (an aiohttp response's) to ``sink`` as it arrives, to its
    end; raises what the stream raised (a dropped connection, an error ``take`` raised).
    """
    try:
        data = content.read_nowait()  # what came in with the headers
        if data:
            sink.take(data)
        if content.is_eof():
            pass
        elif type(content) is StreamReader:
            setattr(content._protocol, _SINK, sink)
            content.__class__ = _SinkReader
            await content.wait_eof()
        else:
            while data := await content.readany():
                sink.take(data)
    finally:
        sink.closed = True
    sink.close()
