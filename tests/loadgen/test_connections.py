"""Connections outside the plan: the pool opened ahead of measuring, and the fresh
connection that tells a server gone (``loadgen.connections``)."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from loadgen_servers import Server

from loadgen.connections import preconnect, unreachable
from loadgen.target import Target


def test_preconnect_opens_that_many_pooled_connections_and_the_next_request_reuses_one() -> None:
    peers: list[tuple[str, int]] = []

    async def models(request: web.Request) -> web.Response:
        peers.append(request.transport.get_extra_info("peername"))
        return web.json_response({"data": []})

    async def go() -> None:
        async with (
            Server(models) as url,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
        ):
            target = Target(url, "vllm", "completions", "m")
            answered: list = []
            await preconnect(session, target, 4, answered.append)
            assert len(peers) == 4 and len(set(peers)) == 4
            # each connection is reported once, as the protocol later requests go out on
            # (the exchanger's idle time of a pooled connection starts there)
            mine = {p.transport.get_extra_info("sockname") for p in answered}
            assert len(answered) == 4 and mine == set(peers)
            async with session.get(target.url("/v1/models")) as resp:
                await resp.read()
            assert len(peers) == 5 and peers[-1] in set(peers[:4])

    asyncio.run(go())


def test_a_server_that_stopped_listening_is_unreachable() -> None:
    async def empty(request: web.Request) -> web.Response:
        return web.Response()

    async def go() -> tuple[str | None, str | None]:
        async with Server(empty) as url:
            up = await unreachable(url)
        return up, await unreachable(url)

    up, gone = asyncio.run(go())
    assert up is None and gone == "ConnectionRefusedError"
