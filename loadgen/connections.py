"""The load generator's connections outside the plan: opened ahead of measuring, and the
fresh one that tells a server gone from a request refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from loadgen.target import Target

#: How long a fresh connection may take before the server counts as not answering.
REACH_TIMEOUT_S = 2.0


async def preconnect(
    session: aiohttp.ClientSession,
    target: Target,
    count: int,
    answered: Callable[[Any], None],
) -> None:
    """Open ``count`` connections of ``session``'s pool (a ``GET /v1/models`` each, all at
    once), so that TCP handshakes are not in the first requests' send times. A server
    that refuses is left to fail the first request with its class. ``answered`` is told
    each connection (its protocol) once its answer is in (when it started to idle)."""
    if not count:
        return

    async def touch() -> None:
        async with session.get(target.url("/v1/models"), headers=target.headers()) as resp:
            await resp.read()
        # A short answer releases its connection with its headers, so ``resp.connection``
        # is gone by now: the response's protocol (private, hence the guard) still is it.
        protocol = getattr(resp, "_protocol", None)
        if getattr(protocol, "transport", None) is not None:
            answered(protocol)

    await asyncio.gather(*(touch() for _ in range(count)), return_exceptions=True)


async def unreachable(base_url: str, timeout_s: float = REACH_TIMEOUT_S) -> str | None:
    """Why a fresh TCP connection to ``base_url``'s host fails (the exception's class),
    ``None`` when the server accepts one."""
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(parts.hostname, port)
        writer.close()
    except (OSError, TimeoutError) as exc:
        return type(exc).__name__
    return None
