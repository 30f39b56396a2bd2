"""Which server is behind an endpoint: vLLM, SGLang, llama.cpp, the embedded engine, or
another OpenAI-compatible one.

Evidence, strongest first:

1. metric names on ``/metrics``: the ``detect`` prefixes of the flavour mappings
   (``probes/mappings/*.toml``, one detector: ``probes.mapping.detect_flavour``), in the
   registry's order (``loadgen.flavours.REGISTRY``: the embedded engine first since it
   also exports vLLM's names);
2. ``owned_by`` of ``/v1/models`` (each flavour's ``owned_by``: ``vllm``, ``sglang``,
   ``llamacpp``, ``prefillscope``);
3. an endpoint only one server has (each flavour's ``evidence``, tried from the
   registry's last entry up, the most specific first: ``/props`` for llama.cpp,
   ``/get_model_info`` for SGLang, then ``/version`` answering ``{"version": …}`` for
   vLLM);

else the generic OpenAI-compatible flavour. An endpoint that cannot be reached is bad
input (``InputError``, one line), not a traceback.

What the server says about its model is read at the same time, so that a run needs no
flag the server can answer: the longest sequence it takes (``max_model_len`` of
``/v1/models`` — vLLM, SGLang, the embedded engine —, SGLang's ``/get_model_info``
``context_length``, llama.cpp's per-slot ``n_ctx``) and the vocabulary size (llama.cpp's
``n_vocab``; else, where the server detokenizes, the first token id its detokenizer
refuses or decodes to nothing, found by bisection in a few dozen small requests:
``/detokenize`` for vLLM, confirmed by ``/v1/completions`` refusing that id; SGLang's
``/v1/detokenize`` with ``skip_special_tokens`` off, where every id of the vocabulary
decodes to text, unconfirmed, since SGLang 0.5.23 dies on a prompt holding an id past
its vocabulary). The served model's path (vLLM's ``/v1/models`` ``root``, SGLang's
``/get_model_info`` ``model_path``, not the served name) and, for a server on this
machine, the command line it was started with (``probes.server_process``; else SGLang's
``/get_server_info`` ``launch_command``) go into ``server_info``, for the commands a
diagnosis proposes. ``Target.discovered`` says where each fact came from.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from loadgen.flavours import GENERIC, REGISTRY, Flavour, by_owner, flavour
from loadgen.target import Target, split_endpoint, with_query
from probes.exposition import parse_exposition
from probes.mapping import detect_flavour
from probes.server_process import server_process
from workloads.errors import InputError

#: Largest vocabulary the bisection over ``/detokenize`` looks for (2^22 ids).
MAX_VOCAB_PROBE = 1 << 22


class _Probe:
    """GETs against one server that never raise: ``(status, body)``, ``(None, None)`` on failure."""

    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, headers: dict, query: str = ""
    ) -> None:
        self.session = session
        self.base_url = base_url
        self.headers = headers
        self.query = query

    async def get(self, path: str) -> tuple[int | None, Any]:
        return await self._call("GET", path, None)

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int | None, Any]:
        return await self._call("POST", path, body)

    async def _call(self, method: str, path: str, body: Any) -> tuple[int | None, Any]:
        url = with_query(self.base_url + path, self.query)
        try:
            async with self.session.request(method, url, json=body, headers=self.headers) as resp:
                text = await resp.text(errors="replace")
                if resp.content_type == "application/json" or text[:1] in "{[":
                    try:
                        return resp.status, await resp.json(content_type=None)
                    except ValueError:
                        pass
                return resp.status, text
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None, None


def flavour_from_metrics(text: str) -> str | None:
    """The built-in flavour whose metric names appear in a ``/metrics`` exposition; None
    when none does or the page does not parse."""
    try:
        exposition = parse_exposition(text)
    except InputError:
        return None
    return detect_flavour(exposition)


async def detect_target(
    base_url: str,
    *,
    backend: str = "auto",
    api: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    vocab_size: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    timeout_s: float = 10.0,
) -> Target:
    """Probe ``base_url`` and return the :class:`Target` to drive.

    ``base_url`` may be written as a user would (``host:8000``, ``http://host:8000/v1``);
    ``backend`` other than ``auto`` skips detection; ``api`` overrides the flavour's
    default API; ``model`` overrides the first model the server lists; ``vocab_size``
    the vocabulary the server would be asked for. A query string in ``base_url``
    (``?api_key=K``) goes with every request, detection's too (``Target.query``).
    """
    base_url, query = split_endpoint(base_url)
    chosen = flavour(backend) if backend != "auto" else None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        probe = _Probe(session, base_url, headers, query)
        models = await _models(session, base_url, headers, query)
        owner, listed, meta = _first_model(models)
        metrics_status, metrics_text = (None, None) if chosen else await probe.get("/metrics")
        kind = chosen or await _detect(probe, owner, metrics_status, metrics_text)
        info = await _server_info(probe, kind)
        name = model or listed
        if not name:
            raise InputError("--model", f"{base_url}/v1/models lists no model", "pass --model NAME")
        facts = ModelFacts.from_listing(meta, info)
        facts.sources["model"] = "--model" if model else "/v1/models data[0].id"
        if vocab_size:
            facts.vocab_size, facts.sources["vocab_size"] = vocab_size, "--vocab-size"
        elif facts.vocab_size is None and kind.vocab_by_bisection:
            await facts.bisect_vocab(probe, name, kind)
    info.update({"owned_by": owner, "models": meta.get("models", [])})
    _locate_model(info, meta, facts.sources)
    _launch_command(info, base_url, kind, facts.sources)
    return Target(
        base_url=base_url,
        flavour=kind.name,
        api=api or kind.default_api,
        model=name,
        api_key=api_key,
        vocab_size=facts.vocab_size,
        count_tokens=count_tokens,
        server_info=info,
        max_model_len=facts.max_model_len,
        discovered=facts.sources,
        query=query,
        metrics_status=metrics_status,
    )


class ModelFacts:
    """Vocabulary size and context length of the served model, and where each was read."""

    def __init__(self) -> None:
        self.vocab_size: int | None = None
        self.max_model_len: int | None = None
        self.sources: dict[str, str] = {}

    def _set(self, name: str, value: Any, source: str) -> None:
        if getattr(self, name) is None and isinstance(value, int) and value > 0:
            setattr(self, name, value)
            self.sources[name] = source

    @classmethod
    def from_listing(cls, meta: dict[str, Any], info: dict[str, Any]) -> ModelFacts:
        """What ``/v1/models`` (``meta``) and the flavour's own endpoint (``info``) said."""
        facts = cls()
        facts._set("max_model_len", meta.get("max_model_len"), "/v1/models max_model_len")
        facts._set("max_model_len", info.get("context_length"), "/get_model_info context_length")
        facts._set("max_model_len", info.get("n_ctx"), "/props n_ctx (per slot)")
        facts._set("max_model_len", meta.get("n_ctx"), "/v1/models meta.n_ctx")
        facts._set("vocab_size", meta.get("n_vocab"), "/v1/models meta.n_vocab")
        return facts

    async def bisect_vocab(self, probe: _Probe, model: str, kind: Flavour) -> None:
        """The vocabulary size: the first token id the flavour's detokenizer refuses or
        decodes to nothing (vLLM answers ``""`` for an unknown id, SGLang too), found by
        bisection, then, where the flavour allows it (``confirm_vocab``), confirmed by
        ``/v1/completions`` refusing a prompt of that id (vLLM refuses it before any
        generation). Nothing is set when the server has no detokenizer, knows every id,
        or does not confirm."""
        path = kind.detokenize or "/detokenize"
        extra = dict(kind.detokenize_options)

        async def known(token_id: int) -> bool | None:
            body_out = {"model": model, "tokens": [token_id], **extra}
            status, body = await probe.post(path, body_out)
            if status is None or status in (404, 405) or status >= 500:
                return None
            text = body.get("prompt", body.get("text")) if isinstance(body, dict) else None
            return status == 200 and bool(text)

        if await known(0) is not True and await known(1) is not True:
            return
        good, bad = 1, 1024
        while True:
            answer = await known(bad)
            if answer is None:
                return
            if not answer:
                break
            if bad >= MAX_VOCAB_PROBE:
                return
            good, bad = bad, bad * 2
        while bad - good > 1:
            middle = (good + bad) // 2
            answer = await known(middle)
            if answer is None:
                return
            good, bad = (middle, bad) if answer else (good, middle)
        if not kind.confirm_vocab:
            self._set("vocab_size", bad, f"{path} (every id below it decodes, {bad} does not)")
            return
        body = {"model": model, "prompt": [bad], "max_tokens": 1}
        status, _ = await probe.post("/v1/completions", body)
        if status is not None and 400 <= status < 500:
            self._set("vocab_size", bad, "/detokenize, confirmed by /v1/completions")


async def _models(session: aiohttp.ClientSession, base_url: str, headers: dict, query: str) -> Any:
    """``/v1/models``; the first request, so it is the one that finds a server missing."""
    url = with_query(base_url + "/v1/models", query)
    try:
        async with session.get(url, headers=headers) as resp:
            status = resp.status
            body = await resp.read()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        if base_url.startswith("https://") and _plain_http(exc):
            raise InputError(
                "--endpoint",
                f"{base_url} answered TLS with plain HTTP ({reason})",
                "use http://" + base_url.removeprefix("https://"),
            ) from None
        raise InputError(
            "--endpoint",
            f"cannot reach {base_url}: {reason}",
            "check the URL and that the server is running",
        ) from None
    if status in (401, 403):
        raise InputError(
            "--api-key",
            f"{url} answered {status}",
            "pass the server's API key (--api-key or PREFILLSCOPE_API_KEY)",
        )
    try:
        listing = json.loads(body)
    except ValueError:
        # Every OpenAI-compatible server answers in JSON, its errors too.
        what = body[:60].decode("utf-8", "replace").split("\n")[0].strip() or "an empty body"
        raise InputError(
            "--endpoint",
            f"{base_url} is not an OpenAI-compatible server: GET /v1/models answered "
            f"{status} with {what!r}, not JSON",
            "point --endpoint at the LLM server's base URL, whose /v1/models lists its model",
        ) from None
    return listing if status < 400 else None


def _plain_http(exc: BaseException) -> bool:
    """Whether a failed TLS handshake met a server speaking plain HTTP (not a certificate
    that failed to verify)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return False
    text = str(exc).lower()
    return isinstance(exc, aiohttp.ClientSSLError) or any(
        mark in text for mark in ("wrong_version_number", "record layer", "packet length")
    )


def _first_model(models: Any) -> tuple[str | None, str | None, dict[str, Any]]:
    """``owned_by`` and id of the first listed model, plus what else it tells."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return None, None, {}
    first = data[0]
    meta: dict[str, Any] = {"models": [m.get("id") for m in data if isinstance(m, dict)]}
    extra = first.get("meta")
    if isinstance(extra, dict) and isinstance(extra.get("n_vocab"), int):
        meta["n_vocab"] = extra["n_vocab"]
    if isinstance(first.get("max_model_len"), int):
        meta["max_model_len"] = first["max_model_len"]
    if isinstance(extra, dict) and isinstance(extra.get("n_ctx"), int):
        meta["n_ctx"] = extra["n_ctx"]
    if isinstance(first.get("root"), str) and first["root"] != first.get("id"):
        meta["root"] = first["root"]  # vLLM: the model's path when it is served by another name
    return first.get("owned_by"), first.get("id"), meta


async def _detect(probe: _Probe, owner: str | None, status: int | None, text: Any) -> Flavour:
    """The flavour from ``/metrics``' answer (``status``, ``text``), the model's owner,
    then each flavour's evidence page."""
    if status == 200 and isinstance(text, str):
        found = flavour_from_metrics(text)
        if found:
            return flavour(found)
    named = by_owner(owner)
    if named is not None:
        return named
    for kind in reversed(REGISTRY):
        if kind.evidence is None:
            continue
        status, body = await probe.get(kind.evidence.path)
        if status == 200 and isinstance(body, dict) and kind.evidence.key in body:
            return kind
    return GENERIC


async def _server_info(probe: _Probe, kind: Flavour) -> dict[str, Any]:
    """Version and build facts for ``run.json`` (what the server says about itself at its
    ``info_path``: vLLM's ``/version``, llama.cpp's ``/props``, SGLang's
    ``/get_model_info``)."""
    info: dict[str, Any] = {}
    if kind.info_path is None:
        return info
    status, body = await probe.get(kind.info_path)
    if status != 200 or not isinstance(body, dict):
        return info
    if "version" in body:  # /version
        info["version"] = body.get("version")
    if "default_generation_settings" in body:  # /props
        info["version"] = body.get("build_info")
        info["total_slots"] = body.get("total_slots")
        settings = body.get("default_generation_settings")
        if isinstance(settings, dict) and isinstance(settings.get("n_ctx"), int):
            info["n_ctx"] = settings["n_ctx"]
    if "model_path" in body:  # /get_model_info
        info["model_path"] = body.get("model_path")
        if isinstance(body.get("context_length"), int):
            info["context_length"] = body["context_length"]
    if kind.server_args_path is not None:  # SGLang's /get_server_info: its ServerArgs
        status, args = await probe.get(kind.server_args_path)
        if status == 200 and isinstance(args, dict):
            for key in ("version", "launch_command", "context_length"):
                if args.get(key) is not None:
                    info.setdefault(key, args[key])
            budgets = [args.get(_arg_key(flag)) for flag in kind.chunk_flags]
            if budgets and isinstance(budgets[0], int):
                info["chunk_budget"] = budgets[0]
    return info


def _arg_key(flag: str) -> str:
    """A server flag's name in a dump of its arguments: ``--chunked-prefill-size`` →
    ``chunked_prefill_size``."""
    return flag.lstrip("-").replace("-", "_")


def _locate_model(info: dict[str, Any], meta: dict[str, Any], sources: dict[str, str]) -> None:
    """The served model's path, not its served name: SGLang's ``/get_model_info``, else
    vLLM's ``/v1/models`` ``root``."""
    if isinstance(info.get("model_path"), str):
        sources["model_path"] = "/get_model_info model_path"
    elif isinstance(meta.get("root"), str):
        info["model_path"] = meta["root"]
        sources["model_path"] = "/v1/models root"


def _launch_command(
    info: dict[str, Any], base_url: str, kind: Flavour, sources: dict[str, str]
) -> None:
    """How the server was started: the local listener's command line, else SGLang's own
    record of its arguments (``launch_command``, after its launcher)."""
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    found = server_process(parts.hostname or "", port)
    if found is not None:
        info["command"], environment = found
        if environment:
            info["environment"] = environment
        sources["command"] = f"/proc/PID/cmdline of the process listening on port {port}"
        return
    recorded = info.get("launch_command")
    if isinstance(recorded, str) and kind.launcher:
        info["command"] = [*shlex.split(kind.launcher), *shlex.split(recorded)]
        sources["command"] = f"{kind.server_args_path} launch_command"
