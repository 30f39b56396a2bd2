"""The embedded engine's OpenAI-compatible HTTP server (aiohttp), shaped like vLLM's.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``POST /tokenize``,
``POST /detokenize``, ``POST /reset_prefix_cache``, ``GET /health``, ``GET /v1/models``,
``GET /version``, ``GET /metrics``. Request rules live in :mod:`simengine.openai_api`,
response bytes in :mod:`simengine.openai_responses`, metrics in :mod:`simengine.metrics`;
this module wires them to the engine's real-time driver.

Streaming follows vLLM: one SSE event per engine step that produced tokens; with
``stream_interval`` k > 1 the first token goes out at once and later tokens in groups
of k (the remainder with the finish). A client that disconnects has its request aborted
in the engine, so its KV blocks return to the pool at once. Every refusal is an
OpenAI-style error body with vLLM's status and shape, and leaves the server serving.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from simengine.config import EngineConfig
from simengine.core import (
    EngineCore,
    EngineRequest,
    RequestRejected,
    RequestUpdate,
    StepResult,
    TokenOut,
)
from simengine.driver import RealTimeDriver
from simengine.metrics import ServerMetrics
from simengine.openai_api import (
    ApiError,
    GenerationRequest,
    ServedModel,
    parse_chat,
    parse_completion,
    parse_detokenize,
    parse_json_body,
    parse_tokenize,
)
from simengine.openai_responses import ResponseShaper, compact_json, sse_error
from simengine.tokenizer import Tokenizer
from workloads.prefix import CacheScope

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"


def package_version() -> str:
    try:
        return version("prefillscope")
    except PackageNotFoundError:
        return "0+unknown"


@dataclass(frozen=True)
class ServerOptions:
    """Server behaviour that is not the engine's: how tokens are grouped into events."""

    stream_interval: int = 1


class _RequestClock:
    """The moments of one request the latency histograms need, on the loop's clock.

    ``emitted`` is called for every engine update as the server emits it, so TTFT and
    the inter-token gaps are what the client sees (give or take the loopback).
    """

    __slots__ = ("arrival", "first", "last", "scheduled")

    def __init__(self, arrival: float) -> None:
        self.arrival = arrival
        self.scheduled: float | None = None
        self.first: float | None = None
        self.last = arrival


class EngineServer:
    """The engine, its real-time driver, its metrics and the aiohttp application."""

    def __init__(self, config: EngineConfig, options: ServerOptions | None = None) -> None:
        self.config = config
        self.options = options or ServerOptions()
        if self.options.stream_interval < 1:
            raise ValueError("stream_interval must be >= 1")
        self.core = EngineCore(config)
        self.tokenizer = Tokenizer(config.vocab_size)
        self.served = ServedModel(config.model_name, config.max_model_len, self.tokenizer)
        self.metrics = ServerMetrics(self.core, config)
        self.driver = RealTimeDriver(self.core, on_step=self._on_step)
        self.version = package_version()
        self.fingerprint = f"prefillscope-{self.version}"
        self.created = int(time.time())
        self._scope_model = config.model
        self._unscheduled: dict[str, _RequestClock] = {}
        self._driver_task: asyncio.Task[None] | None = None
        self.app = self._build_app()

    # -- application ---------------------------------------------------------------------
    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[_api_errors], client_max_size=64 * 1024**2)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/detokenize", self._detokenize)
        app.router.add_post("/reset_prefix_cache", self._reset_prefix_cache)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_get("/metrics", self._metrics)
        app.on_startup.append(self._start_driver)
        app.on_cleanup.append(self._stop_driver)
        return app

    async def _start_driver(self, _app: web.Application) -> None:
        self._driver_task = asyncio.create_task(self.driver.run())

    async def _stop_driver(self, _app: web.Application) -> None:
        self.driver.stop()
        if self._driver_task is not None:
            await self._driver_task

    def _on_step(self, result: StepResult, t_start: float, t_end: float) -> None:
        self.metrics.on_step(result, t_start, t_end)
        if self._unscheduled:
            self._mark_scheduled(t_start)

    def _mark_scheduled(self, t_start: float) -> None:
        """Stamp the queue-time end of requests the scheduler admitted in this step."""
        pending = self._unscheduled
        for seq in self.core.scheduler.running:
            clock = pending.pop(seq.request.request_id, None)
            if clock is not None:
                clock.scheduled = t_start
                if not pending:
                    return

    # -- generation ----------------------------------------------------------------------
    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_completion, "cmpl")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_chat, "chatcmpl")

    async def _generate(
        self,
        request: web.Request,
        parse: Callable[[dict[str, Any], ServedModel], GenerationRequest],
        prefix: str,
    ) -> web.StreamResponse:
        clock = _RequestClock(asyncio.get_running_loop().time())
        req = parse(parse_json_body(await request.read()), self.served)
        request_id = f"{prefix}-{uuid.uuid4().hex[:16]}"
        try:
            queue = self.driver.submit(
                EngineRequest(
                    request_id=request_id,
                    prompt_token_ids=req.prompt_token_ids,
                    max_tokens=req.max_tokens,
                    scope=CacheScope(model=self._scope_model, cache_salt=req.cache_salt),
                    ignore_eos=req.ignore_eos,
                    temperature=req.temperature,
                    seed=req.seed,
                    logprobs=req.logprobs,
                )
            )
        except RequestRejected as exc:
            raise ApiError(400, str(exc), "prompt") from None
        self._unscheduled[request_id] = clock
        shaper = ResponseShaper(
            req,
            request_id=request_id,
            created=int(time.time()),
            model=self.served.name,
            tokenizer=self.tokenizer,
            fingerprint=self.fingerprint,
        )
        finished = False
        try:
            if req.stream:
                response, finished = await self._stream(request, queue, shaper, clock)
            else:
                response, finished = await self._collect(queue, shaper, clock)
            return response
        finally:
            self._unscheduled.pop(request_id, None)
            if not finished:
                self.driver.abort(request_id)

    def _emitted(self, update: RequestUpdate, clock: _RequestClock, now: float) -> None:
        """Latency bookkeeping for one engine update, at the moment it is emitted."""
        if update.new_tokens:
            if clock.first is None:
                clock.first = now
                self.metrics.ttft.observe(now - clock.arrival)
            else:
                self.metrics.itl.observe(now - clock.last)
            clock.last = now
        if update.finished and clock.first is not None:
            # A step's scheduled start may precede an arrival that slipped into its run.
            scheduled = max(clock.arrival, clock.scheduled or clock.arrival)
            self.metrics.request_finished(
                e2e=now - clock.arrival,
                queue=scheduled - clock.arrival,
                prefill=clock.first - scheduled,
                decode=clock.last - clock.first,
            )

    async def _stream(
        self,
        request: web.Request,
        queue: asyncio.Queue[RequestUpdate],
        shaper: ResponseShaper,
        clock: _RequestClock,
    ) -> tuple[web.StreamResponse, bool]:
        """Write SSE events until the request finishes; False if the client went away.

        Each engine step's update becomes its own event even when several queued up
        while this task waited for the CPU, so a stream always has one event per step
        (``stream_interval`` 1) and token counts never depend on server load.
        """
        response = web.StreamResponse(headers={"Content-Type": SSE_CONTENT_TYPE})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        interval = self.options.stream_interval
        pending: list[TokenOut] = []
        sent = False
        try:
            while True:
                update = await queue.get()
                self._emitted(update, clock, loop.time())
                pending.extend(update.new_tokens)
                if update.error is not None:
                    await response.write(sse_error(ApiError(400, update.error)))
                    return response, True
                if update.finished:
                    last = shaper.chunk(pending, update.finish_reason)
                    await response.write(last + shaper.final(update.num_cached_tokens))
                    return response, True
                if not sent or len(pending) >= interval:
                    await response.write(shaper.chunk(pending, None))
                    pending = []
                    sent = True
        except ConnectionError:
            return response, False

    async def _collect(
        self,
        queue: asyncio.Queue[RequestUpdate],
        shaper: ResponseShaper,
        clock: _RequestClock,
    ) -> tuple[web.StreamResponse, bool]:
        loop = asyncio.get_running_loop()
        tokens: list[TokenOut] = []
        while True:
            update = await queue.get()
            self._emitted(update, clock, loop.time())
            if update.error is not None:
                raise ApiError(400, update.error, "prompt")
            tokens.extend(update.new_tokens)
            if update.finished:
                body = shaper.full_body(tokens, update.finish_reason, update.num_cached_tokens)
                return _json(body), True

    # -- everything else -----------------------------------------------------------------
    async def _tokenize(self, request: web.Request) -> web.StreamResponse:
        body = parse_json_body(await request.read())
        ids = parse_tokenize(body, self.served)
        strs = (
            [self.tokenizer.token_text(i) for i in ids] if body.get("return_token_strs") else None
        )
        return _json(
            {
                "count": len(ids),
                "max_model_len": self.config.max_model_len,
                "tokens": ids,
                "token_strs": strs,
            }
        )

    async def _detokenize(self, request: web.Request) -> web.StreamResponse:
        ids = parse_detokenize(parse_json_body(await request.read()), self.served)
        return _json({"prompt": self.tokenizer.decode(ids)})

    async def _reset_prefix_cache(self, _request: web.Request) -> web.StreamResponse:
        return _json({"success": self.core.reset_prefix_cache()})

    async def _health(self, _request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)

    async def _version(self, _request: web.Request) -> web.StreamResponse:
        return _json({"version": self.version})

    async def _models(self, _request: web.Request) -> web.StreamResponse:
        card = {
            "id": self.served.name,
            "object": "model",
            "created": self.created,
            "owned_by": "prefillscope",
            "root": self.config.model,
            "parent": None,
            "max_model_len": self.config.max_model_len,
            "permission": [],
        }
        return _json({"object": "list", "data": [card]})

    async def _metrics(self, _request: web.Request) -> web.StreamResponse:
        response = web.Response(body=self.metrics.render())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response


def _json(body: object, status: int = 200) -> web.Response:
    """A compact JSON response, as vLLM (FastAPI) sends them."""
    return web.json_response(body, status=status, dumps=compact_json)


@web.middleware
async def _api_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Render ApiError (and aiohttp's own 404/405) as vLLM-shaped JSON errors."""
    try:
        return await handler(request)
    except ApiError as exc:
        return _json(exc.body(), status=exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _json(ApiError(exc.status, exc.reason).body(), status=exc.status)
