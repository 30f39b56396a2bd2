"""The embedded engine's OpenAI-compatible HTTP server (aiohttp), shaped like vLLM's.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``POST /tokenize``,
``POST /detokenize``, ``POST /reset_prefix_cache``, ``GET /health``, ``GET /v1/models``,
``GET /version``, ``GET /metrics``. Request rules live in :mod:`simengine.openai_api`,
response bytes in :mod:`simengine.openai_responses`, metrics in :mod:`simengine.metrics`;
this module wires them to the engine's real-time driver.

Streaming follows vLLM: one SSE event per engine step that produced tokens; with
``stream_interval`` k > 1 the first token goes out at once and later tokens in groups
of k (the remainder with the finish). The events are written by
:class:`simengine.sse_stream.SseStream` straight from the driver's step loop. A client
that disconnects has its request aborted in the engine, so its KV blocks return to the
pool at once. Every refusal is an OpenAI-style error body with vLLM's status and shape,
and leaves the server serving.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import HttpVersion11, web
from prometheus_client import CONTENT_TYPE_LATEST

from perfmodel.config import EngineConfig
from runtime.version import package_version
from simengine.arrivals import ARRIVAL, RequestArrivals
from simengine.core import EngineCore, RequestRejected, RequestUpdate, StepResult, TokenOut
from simengine.disagg_config import DisaggConfig
from simengine.driver import RealTimeDriver
from simengine.metrics import RequestLatency, ServerMetrics
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
from simengine.openai_responses import ResponseShaper, compact_json
from simengine.sse_stream import SseStream
from simengine.tokenizer import Tokenizer

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
#: The default idle timeout of a connection (``ServerOptions.idle_timeout_s``), as vLLM's.
DEFAULT_IDLE_TIMEOUT_S = 5.0
#: The largest request body served: what a prompt of ``max_model_len`` tokens can take.
#: A token is at most 16 bytes of JSON: an id with its separator (``347999, ``: 8), the
#: same pretty-printed (a newline and an indent before it: 15), a word token as text
#: (`` tivusa``: 7), a byte token escaped (``\u0001``: 6). A body larger than
#: ``BODY_BASE_BYTES + BODY_BYTES_PER_TOKEN × max_model_len`` (576 KiB at 32,768 tokens)
#: is refused (HTTP 413): by its declared length before a byte is read, a chunked one
#: as soon as what was read passes it; so no body the loop or a worker parses is larger.
BODY_BASE_BYTES = 64 * 1024
BODY_BYTES_PER_TOKEN = 16
#: A body above this is parsed, validated and tokenized on a worker thread, not on the
#: loop that answers /metrics and streams tokens (``json.loads`` of 64 KiB: ~2 ms; it
#: holds the GIL for the whole document, so the byte limit above is also what bounds
#: the loop's pause while a worker parses the largest body).
THREAD_PARSE_BYTES = 64 * 1024
#: A body must arrive at this many bytes a second on average once the connection's idle
#: timeout has passed (Apache's ``mod_reqtimeout``: ``body=20,MinRate=500``): a client
#: that sends its body a byte at a time (or stops half-way) is answered 408 and closed
#: rather than holding a connection for as long as it likes.
BODY_MIN_RATE = 500
_log = logging.getLogger("prefillscope.serve")
T = TypeVar("T")


@dataclass(frozen=True)
class ServerOptions:
    """Server behaviour that is not the engine's: how tokens are grouped into events."""

    stream_interval: int = 1
    #: Prefill/decode disaggregation (``simengine.disagg_server``); None: one engine.
    disagg: DisaggConfig | None = None
    #: Seconds a connection may send nothing while none of its requests is being answered
    #: before it is closed (vLLM's uvicorn closes idle keep-alives after 5 s); None: never.
    idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.idle_timeout_s is not None and not 0 < self.idle_timeout_s <= 3600:
            raise ValueError("idle_timeout_s must be in (0, 3600]")


class EngineServer:
    """The engine, its real-time driver, its metrics and the aiohttp application."""

    def __init__(self, config: EngineConfig, options: ServerOptions | None = None) -> None:
        self.config = config
        self.options = options or ServerOptions()
        if self.options.stream_interval < 1:
            raise ValueError("stream_interval must be >= 1")
        self.tokenizer = Tokenizer(config.vocab_size)
        self.served = ServedModel(
            config.model_name,
            config.max_model_len,
            self.tokenizer,
            scope_model=config.model,
            loras=config.lora_names,
            honour_salts=config.cache_scope == "tenant",
        )
        #: Request arrival stamps, filled by connections served through a ``StampingSite``.
        self.arrivals = RequestArrivals()
        self._build_engine()
        self.version = package_version()
        self.fingerprint = f"prefillscope-{self.version}"
        self.created = int(time.time())
        self._unscheduled: dict[str, RequestLatency] = {}
        self._driver_task: asyncio.Task[None] | None = None
        self.app = self._build_app()

    def _build_engine(self) -> None:
        """The engine core, its metrics and its real-time driver (a P/D server overrides)."""
        self.core = EngineCore(self.config)
        self.metrics = ServerMetrics(self.core, self.config)
        self.driver = RealTimeDriver(
            self.core, on_step=self._on_step, on_late=self.metrics.step_late
        )

    # -- application ---------------------------------------------------------------------
    def _build_app(self) -> web.Application:
        #: The largest request body served (see ``BODY_BYTES_PER_TOKEN``).
        self.max_body_bytes = BODY_BASE_BYTES + BODY_BYTES_PER_TOKEN * self.config.max_model_len
        app = web.Application(
            middlewares=[self.arrivals.middleware(), self._refusals],
            client_max_size=self.max_body_bytes,
        )
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
            latency = pending.pop(seq.request.request_id, None)
            if latency is not None:
                latency.scheduled = t_start
                if not pending:
                    return

    # -- generation ----------------------------------------------------------------------
    @web.middleware
    async def _refusals(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """``_api_errors``, and a body over ``max_body_bytes`` refused by its declared
        length before a byte of it is read; a refused body's connection is closed (no
        lingering read of the rest on the loop)."""
        length = request.content_length
        if length is not None and length > self.max_body_bytes:
            return _too_large(self.max_body_bytes, self.config.max_model_len)
        response = await _api_errors(request, handler)
        if response.status == 413:
            return _too_large(self.max_body_bytes, self.config.max_model_len)
        if response.status == 408:
            response.force_close()
        return response

    async def _parsed(self, request: web.Request, parse: Callable[[dict[str, Any]], T]) -> T:
        """``parse`` of the request's JSON body: read within the size and time limits
        (``_read_body``), then decoded and parsed (validated, tokenized) on the loop when
        small, on a worker thread when larger than ``THREAD_PARSE_BYTES``."""
        raw = await _read_body(request, self.max_body_bytes, self.options.idle_timeout_s)
        if len(raw) > THREAD_PARSE_BYTES:
            return await asyncio.to_thread(lambda: parse(parse_json_body(raw)))
        return parse(parse_json_body(raw))

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_completion)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, parse_chat)

    async def _generate(
        self,
        request: web.Request,
        parse: Callable[[dict[str, Any], ServedModel], GenerationRequest],
    ) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        # Arrival is when the request's first bytes were read (simengine.arrivals), not
        # when this handler ran: the client's TTFT includes the time in between.
        latency = RequestLatency(self.metrics, request[ARRIVAL])
        req = await self._parsed(request, lambda body: parse(body, self.served))
        request_id = req.engine.request_id
        shaper = ResponseShaper(
            req,
            created=int(time.time()),
            model=self.served.name,
            tokenizer=self.tokenizer,
            fingerprint=self.fingerprint,
        )
        sink: SseStream | asyncio.Queue[RequestUpdate]
        if req.stream:
            sink = SseStream(shaper, latency, loop, self.options.stream_interval)
        else:
            sink = asyncio.Queue()
        try:
            self.driver.submit_to(req.engine, sink)
        except RequestRejected as exc:
            raise ApiError(400, str(exc), "prompt") from None
        self._unscheduled[request_id] = latency
        finished = False
        try:
            if isinstance(sink, SseStream):
                response, finished = await self._stream(request, sink)
                return response
            body = await self._collect(sink, shaper, latency)
            finished = True
            return _json(body)
        finally:
            self._unscheduled.pop(request_id, None)
            if not finished:
                self.driver.abort(request_id)

    async def _stream(
        self, request: web.Request, sink: SseStream
    ) -> tuple[web.StreamResponse, bool]:
        """Send the SSE headers and wait while ``sink`` writes the events; False if cut."""
        response = web.StreamResponse(headers={"Content-Type": SSE_CONTENT_TYPE})
        chunked = request.version >= HttpVersion11
        if chunked:
            response.enable_chunked_encoding()
        try:
            await response.prepare(request)
        except ConnectionResetError:  # the client left before its first byte: one line
            _log.warning("client left before its first token; request aborted")
            return response, False
        sink.attach(request.transport, chunked=chunked)
        finished = await sink.done
        if finished:
            await response.write_eof()
        return response, finished

    async def _collect(
        self,
        queue: asyncio.Queue[RequestUpdate],
        shaper: ResponseShaper,
        latency: RequestLatency,
    ) -> dict[str, Any]:
        """Wait for the whole output of a non-streaming request; its response body."""
        loop = asyncio.get_running_loop()
        tokens: list[TokenOut] = []
        while True:
            update = await queue.get()
            latency.emitted(bool(update.new_tokens), update.finished, loop.time())
            if update.error is not None:
                raise ApiError(400, update.error, "prompt")
            tokens.extend(update.new_tokens)
            if update.finished:
                return shaper.full_body(tokens, update.finish_reason, update.num_cached_tokens)

    # -- everything else -----------------------------------------------------------------
    async def _tokenize(self, request: web.Request) -> web.StreamResponse:
        def tokenize(body: dict[str, Any]) -> tuple[list[int], list[str] | None]:
            ids = parse_tokenize(body, self.served)
            want = body.get("return_token_strs")
            return ids, [self.tokenizer.token_text(i) for i in ids] if want else None

        ids, strs = await self._parsed(request, tokenize)
        return _json(
            {
                "count": len(ids),
                "max_model_len": self.config.max_model_len,
                "tokens": ids,
                "token_strs": strs,
            }
        )

    async def _detokenize(self, request: web.Request) -> web.StreamResponse:
        text = await self._parsed(
            request, lambda body: self.tokenizer.decode(parse_detokenize(body, self.served))
        )
        return _json({"prompt": text})

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
            # llama.cpp's field: token-id prompts need the vocabulary size, and a bench
            # against `prefillscope serve` should not have to be told it.
            "meta": {"n_vocab": self.config.vocab_size},
        }
        adapters = [card | {"id": name, "parent": self.served.name} for name in self.served.loras]
        return _json({"object": "list", "data": [card, *adapters]})

    async def _metrics(self, _request: web.Request) -> web.StreamResponse:
        response = web.Response(body=self.metrics.render())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response


async def _read_body(request: web.Request, limit: int, idle_s: float | None) -> bytes:
    """The request's body, read as it arrives: HTTP 413 as soon as more than ``limit``
    bytes came (a chunked body declares no length), HTTP 408 when it comes slower than
    ``idle_s`` plus a second for every ``BODY_MIN_RATE`` bytes received (a client that
    stopped half-way, or trickles; ``idle_s`` None: no deadline)."""
    loop = asyncio.get_running_loop()
    deadline = None if idle_s is None else loop.time() + idle_s
    parts: list[bytes] = []
    size = 0
    while True:
        try:
            async with asyncio.timeout_at(deadline):
                chunk = await request.content.readany()
        except TimeoutError:
            raise ApiError(
                408, f"request body not received in time ({size:,} bytes came before the deadline)"
            ) from None
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
        parts.append(chunk)
        if deadline is not None:
            deadline += len(chunk) / BODY_MIN_RATE


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


def _too_large(limit: int, max_model_len: int) -> web.Response:
    message = (
        f"request body larger than {limit:,} bytes: more than a prompt of max_model_len "
        f"{max_model_len} tokens can take"
    )
    response = _json(ApiError(413, message, "prompt").body(), status=413)
    response.force_close()  # no lingering read of the rest of the body on the loop
    return response
