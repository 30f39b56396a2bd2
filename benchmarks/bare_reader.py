"""The bare reader: the floor for a Python streaming client, as a process of its own.

``streams`` closed-loop users each post the next request body (one JSON document a line
of ``BODIES``) to ``URL/v1/completions`` when their last stream ended, and read the
stream with aiohttp's ``iter_any()``: one ``perf_counter`` per read and the events in it
counted with ``bytes.count``, nothing else (no SSE parsing, no records). Run on uvloop.
When every stream is done, each request's (send time, read times, events per read)
goes to ``OUT`` (``marshal``) for the benchmark that started it.

Run: ``python benchmarks/bare_reader.py URL BODIES STREAMS OUT``
"""

from __future__ import annotations

import asyncio
import marshal
import sys
import time

import aiohttp

HEADERS = {"Content-Type": "application/json"}
Reads = list[tuple[float, list[float], list[int]]]


async def read_streams(url: str, bodies: list[bytes], streams: int) -> Reads:
    """Every body streamed by ``streams`` users; (sent, read times, events) per request."""
    reads: Reads = []
    queue = iter(bodies)

    async def user(session: aiohttp.ClientSession) -> None:
        for data in queue:
            times: list[float] = []
            events: list[int] = []
            sent = time.perf_counter()
            async with session.post(url + "/v1/completions", data=data, headers=HEADERS) as r:
                async for chunk in r.content.iter_any():
                    times.append(time.perf_counter())
                    events.append(chunk.count(b"\n\n"))
            reads.append((sent, times, events))

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(user(session) for _ in range(streams)))
    return reads


def main() -> None:
    import uvloop

    url, bodies, streams, out = sys.argv[1:5]
    with open(bodies, "rb") as f:
        lines = f.read().splitlines()
    reads = uvloop.run(read_streams(url, lines, int(streams)))
    with open(out, "wb") as f:
        marshal.dump(reads, f)


if __name__ == "__main__":
    main()
