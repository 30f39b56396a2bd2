"""``loadgen.cache``: what the prefix cache held when measuring began, against real
HTTP servers on 127.0.0.1 that accept or refuse the reset."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from loadgen.cache import CacheProtocol, apply_cache_protocol
from loadgen.target import Target
from runfmt.codec import encode
from workloads.errors import InputError


def test_a_salt_prefixes_every_tenant_and_stands_alone_without_one():
    salted = CacheProtocol("salt", "salt", salt="ps1")
    assert (salted.salt_for("tenant-a"), salted.salt_for(None)) == ("ps1-tenant-a", "ps1")
    assert CacheProtocol("warm", "warm").salt_for("tenant-a") == "tenant-a"
    assert set(encode(salted.describe())) == {"requested", "applied", "salt", "note"}


async def _apply(routes: dict[str, int], flavour: str, mode: str) -> tuple[CacheProtocol, list]:
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path_qs}")
        if request.path == "/slots" and request.method == "GET":
            return web.json_response([{"id": 0}, {"id": 1}])
        return web.Response(status=routes.get(request.path, 404))

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as session:
        target = Target(str(server.make_url("/")), flavour, "completions", "m")
        return await apply_cache_protocol(session, target, mode), seen


def test_a_reset_the_server_accepts_is_applied():
    protocol, seen = asyncio.run(_apply({"/reset_prefix_cache": 200}, "vllm", "reset"))
    assert (protocol.applied, protocol.salt, protocol.note) == ("reset", None, None)
    assert seen == ["POST /reset_prefix_cache"]


def test_vllm_without_dev_mode_falls_back_to_a_fresh_salt_and_says_why():
    protocol, _ = asyncio.run(_apply({}, "vllm", "reset"))
    assert protocol.applied == "salt" and protocol.salt.startswith("ps")
    assert "answered 404 (vLLM routes it only with VLLM_SERVER_DEV_MODE=1)" in protocol.note
    again, _ = asyncio.run(_apply({}, "vllm", "salt"))
    assert again.salt != protocol.salt and again.note is None


def test_llamacpp_erases_every_slot():
    protocol, seen = asyncio.run(_apply({"/slots/0": 200, "/slots/1": 200}, "llamacpp", "reset"))
    assert protocol.applied == "reset"
    assert seen == ["GET /slots", "POST /slots/0?action=erase", "POST /slots/1?action=erase"]


def test_a_server_without_salt_or_reset_keeps_its_cache_and_says_so():
    protocol, seen = asyncio.run(_apply({}, "openai", "reset"))
    assert (protocol.applied, seen) == ("warm", [])
    assert protocol.note == (
        "the openai backend has no cache-reset endpoint; "
        "openai takes no per-request cache salt: cache kept as is"
    )


def test_an_unknown_mode_or_an_unreachable_server_is_one_input_error():
    with pytest.raises(InputError) as err:
        asyncio.run(_apply({}, "vllm", "flush"))
    assert err.value.field == "--cache"

    async def unreachable() -> None:
        async with aiohttp.ClientSession() as session:
            await apply_cache_protocol(session, Target("http://127.0.0.1:9", "vllm",
                                                       "completions", "m"), "reset")  # fmt: skip

    with pytest.raises(InputError) as err:
        asyncio.run(unreachable())
    assert err.value.field == "--endpoint" and "reset its cache" in err.value.problem
