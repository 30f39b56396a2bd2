"""A misbehaving OpenAI-compatible server for the fault-injection suite (aiohttp, loopback).

``python tests/support/fault_server.py --fault NAME [--keepalive S]`` serves ``/v1/models`` and a
vLLM-shaped ``/v1/completions`` stream (the generator of ``loadgen_servers``), and prints
its URL. Every other completion request (the 2nd, 4th … by arrival; the first is the
bench's own test request) gets the fault (``nonsense-usage``: a well-formed stream whose
final usage is impossible, in turn cached > prompt tokens, negative prompt tokens, and
40 more completion tokens than were streamed); ``all-5xx`` and ``slow-bytes`` apply to every
request, ``all-5xx-after-first`` to every request after the first. Two faults lie or die
instead: ``die-after:N`` answers N completions well, then the process exits (every later
connection refused: a server that died mid-run); ``lying-cache`` answers every request
well but reports its whole prompt as cached, fresh prompts too (``cached_tokens`` that
contradict themselves). ``negative-completion`` reports ``completion_tokens: -3`` on
every other request. ``stall-metrics`` answers every completion well and serves a
``/metrics`` page whose first GET (the bench's detection) is answered and every later
one stalls after its headers and a few bytes (``/metrics`` is 404 under every other
fault). A separate process, so a test can SIGKILL it mid-run and ``prefillscope bench
--endpoint`` drives it as it would a server.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).parent))
from loadgen_servers import _event, _start_stream

MODEL = "fault-model"
#: The ``stall-metrics`` fault's page (when it answers).
METRICS_PAGE = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
#: The messages the faults carry, which the client must keep on its rows.
MESSAGES = {
    "429": "rate limited: 3 requests in flight, limit 2",
    "503": "engine overloaded: KV cache 100% used",
    "500": "internal error: worker died",
    "error-event": "KV cache exhausted while decoding",
}


def _error(status: int) -> web.Response:
    body = {"object": "error", "message": MESSAGES[str(status)], "code": status}
    return web.json_response(body, status=status)


#: The impossible final usages of ``nonsense-usage``, in turn: (prompt, completion, cached).
NONSENSE_USAGE = (
    lambda prompt, n: (prompt, n, prompt + 100),
    lambda prompt, n: (-5, n, 0),
    lambda prompt, n: (prompt, n + 40, 0),
)


#: ``negative-completion``'s final usage on every other request: completion_tokens -3.
NEGATIVE_COMPLETION = len(NONSENSE_USAGE)
_USAGES = (*NONSENSE_USAGE, lambda prompt, n: (prompt, -3, 0))


def _events(
    prompt: int, max_tokens: int, nonsense: int | None = None, cached: int | None = None
) -> list[bytes]:
    """A whole vLLM-shaped stream of ``max_tokens`` tokens, event by event; with
    ``nonsense``, its final usage is ``NONSENSE_USAGE[nonsense]``'s; with ``cached``,
    its usage reports that many cached prompt tokens."""
    events = [
        _event(i + 1, prompt, "ab", "length" if i + 1 == max_tokens else None, None)
        for i in range(max_tokens)
    ]
    usage: dict = {"prompt_tokens": prompt, "completion_tokens": max_tokens}
    if nonsense is not None:
        reported, completion, cached = _USAGES[nonsense](prompt, max_tokens)
        usage = {"prompt_tokens": reported, "completion_tokens": completion}
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    elif cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    tail = {"id": "cmpl-fault", "object": "text_completion", "choices": [], "usage": usage}
    return [*events, b"data: " + json.dumps(tail).encode() + b"\n\n", b"data: [DONE]\n\n"]


async def _abort(request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
    await asyncio.sleep(0.05)  # let the bytes before the cut reach the client
    assert request.transport is not None
    request.transport.abort()
    return resp


async def _fault(name: str, request: web.Request, events: list[bytes]) -> web.StreamResponse:
    if name == "http-429-5xx":
        return _error(429 if request["index"] % 4 == 1 else 503)
    if name in ("all-5xx", "all-5xx-after-first"):
        return _error(500)
    if name == "no-headers":
        assert request.transport is not None
        request.transport.abort()  # the request was read; no status line ever comes
        return web.Response()
    if name == "stall-headers":
        await asyncio.sleep(3600)  # the request was read; no status line, no close
    if name == "json-not-sse":
        return web.json_response({"id": "cmpl-fault", "object": "text_completion"})
    resp = await _start_stream(request)
    await resp.write(events[0])
    if name == "error-event":
        error = {"error": {"message": MESSAGES["error-event"], "type": "InternalServerError"}}
        await resp.write(b"data: " + json.dumps(error).encode() + b"\n\n")
        return await _abort(request, resp)
    if name == "malformed-event":
        await resp.write(b'data: {"choices": [{"text": oops\n\n')
        for event in events[1:]:
            await resp.write(event)
    elif name == "truncated-event":
        await resp.write(events[1][: len(events[1]) // 2])
        return await _abort(request, resp)
    elif name == "stall":
        await asyncio.sleep(3600)
    elif name == "oversize":
        await resp.write(b'data: {"choices": [{"text": "' + b"x" * 3_000_000 + b'"}]}\n\n')
    await resp.write_eof()
    return resp


def app(fault: str) -> web.Application:
    counter = itertools.count()

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        request["index"] = index = next(counter)
        nonsense = (index // 2) % len(NONSENSE_USAGE) if fault == "nonsense-usage" else None
        if fault == "negative-completion":
            nonsense = NEGATIVE_COMPLETION
        if index % 2 == 0:
            nonsense = None
        prompt = len(body.get("prompt") or [])
        cached = prompt if fault == "lying-cache" else None
        events = _events(prompt, int(body.get("max_tokens", 4)), nonsense, cached)
        if fault == "slow-bytes":
            resp = await _start_stream(request)
            for byte in b"".join(events):
                await resp.write(bytes([byte]))
                await asyncio.sleep(0.0002)
            await resp.write_eof()
            return resp
        if fault.startswith("die-after:") and index >= int(fault.split(":")[1]):
            os._exit(0)  # the server dies: this request is cut, every later one refused
        every = fault == "all-5xx" or (fault == "all-5xx-after-first" and index > 0)
        well = ("none", "nonsense-usage", "lying-cache", "negative-completion", "stall-metrics")
        if not (fault in well or fault.startswith("die-after:")) and (every or index % 2 == 1):
            return await _fault(fault, request, events)
        resp = await _start_stream(request)
        for event in events:
            await resp.write(event)
            await asyncio.sleep(0.002)
        await resp.write_eof()
        return resp

    scrapes = itertools.count()

    async def metrics(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain; version=0.0.4"})
        await resp.prepare(request)
        await resp.write(METRICS_PAGE[:20])
        if next(scrapes) > 0:
            await asyncio.sleep(3600)  # the rest of the page never comes
        await resp.write(METRICS_PAGE[20:])
        await resp.write_eof()
        return resp

    application = web.Application()
    if fault == "stall-metrics":
        application.router.add_get("/metrics", metrics)
    application.router.add_get("/v1/models", models)
    application.router.add_post("/v1/completions", completions)
    return application


def start(fault: str, keepalive: float = 75.0) -> tuple[subprocess.Popen[str], str]:
    """This server in a process of its own, with ``fault``; the process and its URL."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--fault", fault, "--keepalive", str(keepalive)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("http://"), f"fault server did not start: {url!r}"
    return proc, url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fault", default="none")
    parser.add_argument("--keepalive", type=float, default=75.0, help="idle keep-alive (s)")
    args = parser.parse_args()

    async def serve() -> None:
        runner = web.AppRunner(app(args.fault), access_log=None, keepalive_timeout=args.keepalive)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
