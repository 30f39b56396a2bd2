"""vLLM's ``cached_tokens`` when it is absent: unknown, never 0.

vLLM reports a request's cached tokens only in a usage object, which a stream carries
only when the request asks for it (``stream_options.include_usage``). The load generator
always asks; here a forwarding proxy on loopback drops ``stream_options`` from every
request on its way to the session's vLLM target, so the streams the bench reads are
vLLM's own bytes without any usage — as from a gateway that strips the option. (A
server started with ``--no-enable-prompt-tokens-details`` would do too, at the cost of a
second vLLM start.) The requests do hit the cache, as vLLM's counters show; each
request's ``cached_tokens`` must still be null and the observed hit rate null, not 0.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from bench_support import requests_table
from real_vllm import VOCAB_SIZE

from session.bench_options import BenchOptions
from session.bench_runner import run_bench
from session.exit_status import BenchOutcome

pytestmark = pytest.mark.real_vllm

WORKLOAD = {"num_requests": 8, "concurrency": 1, "seed": 5, "groups": 2, "output_len": 4}


@asynccontextmanager
async def usage_stripping_proxy(upstream: str) -> AsyncIterator[str]:
    """A loopback proxy to ``upstream`` that removes ``stream_options`` from JSON bodies."""
    async with aiohttp.ClientSession() as session:

        async def forward(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            if request.content_type == "application/json" and body:
                payload = json.loads(body)
                payload.pop("stream_options", None)
                body = json.dumps(payload).encode()
            headers = {"Content-Type": request.content_type}
            async with session.request(
                request.method, upstream + request.path_qs, data=body, headers=headers
            ) as reply:
                response = web.StreamResponse(
                    status=reply.status, headers={"Content-Type": reply.content_type}
                )
                await response.prepare(request)
                try:
                    async for piece in reply.content.iter_any():
                        await response.write(piece)
                    await response.write_eof()
                except ConnectionResetError:
                    pass  # the client went first (a scrape cut short at the end of the run)
                return response

        app = web.Application()
        app.router.add_route("*", "/{path:.*}", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}"
        finally:
            await runner.cleanup()


async def bench_through_proxy(upstream: str, out: Path) -> BenchOutcome:
    async with usage_stripping_proxy(upstream) as proxy:
        options = BenchOptions(
            workload="system-prompt",
            overrides=WORKLOAD,
            endpoint=proxy,
            vocab_size=VOCAB_SIZE,
            cache_protocol="reset",
            metrics_interval_s=0.1,
            gpu="off",
            out=out,
        )
        return await run_bench(options)


def test_absent_cached_tokens_are_unknown_not_zero(vllm_url: str, tmp_path: Path) -> None:
    outcome = asyncio.run(bench_through_proxy(vllm_url, tmp_path / "run"))
    assert outcome.status == "complete"
    requests = requests_table(outcome.run_dir)
    assert (requests["status"] == "ok").all() and len(requests) == WORKLOAD["num_requests"]
    assert (requests["output_tokens"] > 0).all()
    # The prefixes were cached (the oracle and vLLM's own counters say so) ...
    assert (requests["expected_cached_tokens"] > 0).sum() >= 6
    server_prefix = outcome.summary.to_json()["server"]["prefix"]
    assert server_prefix["hits"]["value"] > 0
    assert server_prefix["observed_hit_rate"]["value"] > 0.5
    # ... but no stream said how many tokens, so no request and no summary claims 0.
    assert requests["cached_tokens"].isna().all()
    prefix = outcome.summary.to_json()["prefix"]
    assert prefix["observed_hit_rate"] is None and prefix["reported_requests"] == 0
    assert prefix["expected_hit_rate"] > 0.5
