"""``simengine.arrivals``: a request's arrival is when its first bytes were read, handed
to its handler by the middleware; on real loopback connections."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from simengine.arrivals import ARRIVAL, RequestArrivals, StampingSite


class Connection:
    """Stands for a transport: the arrivals book keys on the object, weakly."""


def test_the_first_read_after_a_take_starts_a_request_and_later_reads_do_not_move_it():
    book = RequestArrivals()
    conn = Connection()
    book.seen(conn, 10.0)
    book.seen(conn, 12.0)  # the rest of the same request
    assert book.take(conn, 15.0) == 10.0
    assert book.take(conn, 20.0) == 20.0  # nothing pending: the handler's start
    book.seen(conn, 30.0)
    assert book.take(conn, 25.0) == 25.0  # a stamp after the handler started is not trusted
    assert book.take(None, 7.0) == 7.0


def test_each_request_on_a_kept_alive_connection_gets_its_own_arrival_before_its_handler():
    async def run() -> list[tuple[float, float]]:
        book = RequestArrivals()

        async def handle(request: web.Request) -> web.Response:
            start = asyncio.get_running_loop().time()
            return web.json_response([request[ARRIVAL], start])

        app = web.Application(middlewares=[book.middleware()])
        app.router.add_get("/", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await StampingSite(runner, "127.0.0.1", 0, book).start()
        port = runner.addresses[0][1]
        try:
            connector = aiohttp.TCPConnector(limit=1)
            async with aiohttp.ClientSession(connector=connector) as session:
                out = []
                for _ in range(2):
                    async with session.get(f"http://127.0.0.1:{port}/") as resp:
                        out.append(tuple(await resp.json()))
                return out
        finally:
            await runner.cleanup()

    (arrival1, start1), (arrival2, start2) = asyncio.run(run())
    assert arrival1 <= start1 and arrival2 <= start2
    assert arrival2 >= start1  # the second request's bytes came after the first was served
