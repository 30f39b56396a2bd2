"""Tiny HTTP servers for the load generator's tests, over real loopback sockets.

They replay the real captured bytes in ``tests/fixtures`` (whole, in pieces, or cut at a
byte and then dropped), answer with real captured error bodies, stall, or generate a
vLLM-shaped stream with a set time to first token and inter-token gap. Run as a script
(``python tests/support/loadgen_servers.py``) the generating server is a separate process that a
test can kill.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pandas as pd
from aiohttp import web

from loadgen.load_options import LoadOptions, LoadResult
from loadgen.run import run_load
from loadgen.target import Target
from runfmt.rundir import RunDir
from runfmt.tables import RunTables
from runtime.clock import RunClock
from workloads.plan import Plan, Prompt, RequestSpec

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Server:
    """An aiohttp app on 127.0.0.1 and a free port; ``async with Server(handler) as url``
    (``https://`` with ``ssl_context``)."""

    def __init__(
        self,
        handler: Handler,
        paths: tuple[str, ...] = ("/{tail:.*}",),
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.app = web.Application()
        for path in paths:
            self.app.router.add_route("*", path, handler)
        self.runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True)
        self.ssl_context = ssl_context
        self.url = ""

    async def __aenter__(self) -> str:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        await site.start()
        port = self.runner.addresses[0][1]
        scheme = "https" if self.ssl_context is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{port}"
        return self.url

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


async def _start_stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return resp


def replay(body: bytes, pieces: list[int] | None = None, gap_s: float = 0.0) -> Handler:
    """Answer with ``body`` as an event stream, written in pieces of the given sizes."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = await _start_stream(request)
        sizes = pieces or [len(body)]
        at = 0
        for size in sizes:
            await resp.write(body[at : at + size])
            at += size
            if gap_s:
                await asyncio.sleep(gap_s)
        if at < len(body):
            await resp.write(body[at:])
        await resp.write_eof()
        return resp

    return handler


def cut_after(body: bytes, n: int) -> Handler:
    """Send the first ``n`` bytes of the stream, then drop the connection."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = await _start_stream(request)
        await resp.write(body[:n])
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return resp

    return handler


def status_reply(status: int, body: bytes, content_type: str = "application/json") -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        return web.Response(status=status, body=body, content_type=content_type)

    return handler


def stall(seconds: float = 60.0) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        await asyncio.sleep(seconds)
        return web.Response(text="too late")

    return handler


def _event(
    completion: int, prompt: int, text: str, finish: str | None, ids: list[int] | None
) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    choice["token_ids"] = ids
    usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion}
    usage["completion_tokens"] = completion
    obj = {"id": "cmpl-test", "object": "text_completion", "choices": [choice], "usage": usage}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def generator(
    ttft_s: float, itl_s: float, tokens_per_event: int = 1, serial: bool = False
) -> Handler:
    """A vLLM-shaped completions stream with continuous usage, paced as asked.

    ``serial``: one request at a time (a server whose capacity is one stream). Returned
    token ids (with ``return_token_ids``) are 1000, 1001, … Each request body is kept in
    ``handler.bodies``.
    """
    lock = asyncio.Lock()
    bodies: list[dict] = []

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        bodies.append(body)
        prompt = len(body.get("prompt") or [])
        want_ids = bool(body.get("return_token_ids"))
        max_tokens = int(body.get("max_tokens", 16))
        await asyncio.sleep(ttft_s)
        resp = await _start_stream(request)
        done = 0
        while done < max_tokens:
            if done:
                await asyncio.sleep(itl_s)
            ids = list(range(1000 + done, 1000 + min(max_tokens, done + tokens_per_event)))
            done += len(ids)
            finish = "length" if done == max_tokens else None
            text = "ab" * len(ids)
            await resp.write(_event(done, prompt, text, finish, ids if want_ids else None))
        usage = {"prompt_tokens": prompt, "completion_tokens": done}
        usage["prompt_tokens_details"] = {"cached_tokens": 0}
        tail = {"id": "cmpl-test", "object": "text_completion", "choices": [], "usage": usage}
        await resp.write(b"data: " + json.dumps(tail).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def handler(request: web.Request) -> web.StreamResponse:
        if not serial:
            return await generate(request)
        async with lock:
            return await generate(request)

    handler.bodies = bodies  # type: ignore[attr-defined]
    return handler


def routes(by_path: dict[str, Handler], default: Handler) -> Handler:
    """Dispatch on the request path."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await by_path.get(request.path, default)(request)

    return handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ttft", type=float, default=0.02)
    parser.add_argument("--itl", type=float, default=0.01)
    args = parser.parse_args()

    async def serve() -> None:
        async with Server(generator(args.ttft, args.itl)) as url:
            print(url, flush=True)
            await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())


def specs(
    n: int, prompt_len: int = 8, max_tokens: int = 16, gap_s: float | None = None
) -> list[RequestSpec]:
    """``n`` token-prompt requests, open loop every ``gap_s`` (closed loop when ``None``)."""
    return [
        RequestSpec(
            f"r{i}",
            Prompt.of_tokens([300 + i] * prompt_len),
            max_tokens,
            intended_s=None if gap_s is None else i * gap_s,
        )
        for i in range(n)
    ]


async def run_against(
    url: str,
    requests: list[RequestSpec],
    tmp_path: Path,
    *,
    flavour: str = "vllm",
    api: str = "completions",
    model: str = "tiny-llama",
    concurrency: int | None = 1,
    count_tokens: Callable[[str], int] | None = None,
    **options: object,
) -> tuple[LoadResult, pd.DataFrame, pd.DataFrame, RunDir]:
    """Run a plan of ``requests`` against ``url``; return (result, requests, chunks, run dir)."""
    api_key = options.pop("api_key", None)
    target = Target(url, flavour, api, model, api_key, vocab_size=8192, count_tokens=count_tokens)
    run_dir = RunDir(tmp_path / "run", create=True)
    plan = Plan("test", 0, list(requests), concurrency=concurrency)
    result = await run_load(plan, target, run_dir, RunClock(), LoadOptions(**options))
    run_dir.close()
    return result, RunTables(run_dir).requests, RunTables(run_dir).chunks, run_dir
