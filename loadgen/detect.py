"""Which server is behind an endpoint: vLLM, SGLang, llama.cpp, the embedded engine, or
another OpenAI-compatible one.

Evidence, strongest first:

1. metric-name prefixes on ``/metrics``: ``prefillscope_engine_`` (the embedded engine,
   which also exports vLLM's names, so it is checked first), ``vllm:``, ``sglang:`` or
   ``sglang_``, ``llamacpp:``;
2. ``owned_by`` of ``/v1/models`` (``vllm``, ``sglang``, ``llamacpp``, ``prefillscope``);
3. endpoints only one server has: ``/props`` (llama.cpp), ``/get_model_info``
   (SGLang), ``/version`` answering ``{"version": …}`` (vLLM);

else ``openai``. An endpoint that cannot be reached is bad input (``InputError``, one
line), not a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp

from loadgen.target import DEFAULT_API, FLAVOURS, Target
from workloads.errors import InputError

_METRIC_PREFIXES = (
    ("prefillscope_engine_", "embedded"),
    ("vllm:", "vllm"),
    ("sglang:", "sglang"),
    ("sglang_", "sglang"),
    ("llamacpp:", "llamacpp"),
)
_OWNERS = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp", "prefillscope": "embedded"}


class _Probe:
    """GETs against one server that never raise: ``(status, body)``, ``(None, None)`` on failure."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, headers: dict) -> None:
        self.session = session
        self.base_url = base_url
        self.headers = headers

    async def get(self, path: str) -> tuple[int | None, Any]:
        try:
            async with self.session.get(self.base_url + path, headers=self.headers) as resp:
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
    """The flavour whose metric names appear in a ``/metrics`` exposition."""
    names = {
        line.split(" ", 3)[2] if line.startswith("# TYPE ") else line
        for line in text.splitlines()
        if line and (not line.startswith("#") or line.startswith("# TYPE "))
    }
    for prefix, flavour in _METRIC_PREFIXES:
        if any(name.startswith(prefix) for name in names):
            return flavour
    return None


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

    ``backend`` other than ``auto`` skips detection; ``api`` overrides the flavour's
    default API; ``model`` overrides the first model the server lists.
    """
    base_url = base_url.rstrip("/")
    if backend != "auto" and backend not in FLAVOURS:
        raise InputError(
            "--backend", f"unknown backend {backend!r}", "use auto or one of " + ", ".join(FLAVOURS)
        )
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        probe = _Probe(session, base_url, headers)
        models = await _models(session, base_url, headers)
        owner, listed, meta = _first_model(models)
        flavour = backend if backend != "auto" else await _detect(probe, owner)
        info = await _server_info(probe, flavour)
    info.update({"owned_by": owner, "models": meta.get("models", [])})
    vocab = vocab_size or meta.get("n_vocab")
    name = model or listed
    if not name:
        raise InputError("--model", f"{base_url}/v1/models lists no model", "pass --model NAME")
    return Target(
        base_url=base_url,
        flavour=flavour,
        api=api or DEFAULT_API[flavour],
        model=name,
        api_key=api_key,
        vocab_size=vocab,
        count_tokens=count_tokens,
        server_info=info,
    )


async def _models(session: aiohttp.ClientSession, base_url: str, headers: dict) -> Any:
    """``/v1/models``; the first request, so it is the one that finds a server missing."""
    url = base_url + "/v1/models"
    try:
        async with session.get(url, headers=headers) as resp:
            status = resp.status
            body = await resp.read()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
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
        return json.loads(body) if status < 400 else None
    except ValueError:
        return None


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
    return first.get("owned_by"), first.get("id"), meta


async def _detect(probe: _Probe, owner: str | None) -> str:
    status, text = await probe.get("/metrics")
    if status == 200 and isinstance(text, str):
        found = flavour_from_metrics(text)
        if found:
            return found
    if owner in _OWNERS:
        return _OWNERS[owner]
    status, body = await probe.get("/props")
    if status == 200 and isinstance(body, dict) and "default_generation_settings" in body:
        return "llamacpp"
    status, body = await probe.get("/get_model_info")
    if status == 200 and isinstance(body, dict) and "model_path" in body:
        return "sglang"
    status, body = await probe.get("/version")
    if status == 200 and isinstance(body, dict) and "version" in body:
        return "vllm"
    return "openai"


async def _server_info(probe: _Probe, flavour: str) -> dict[str, Any]:
    """Version and build facts for ``run.json`` (what the server says about itself)."""
    info: dict[str, Any] = {}
    if flavour in ("vllm", "embedded"):
        status, body = await probe.get("/version")
        if status == 200 and isinstance(body, dict):
            info["version"] = body.get("version")
    elif flavour == "llamacpp":
        status, body = await probe.get("/props")
        if status == 200 and isinstance(body, dict):
            info["version"] = body.get("build_info")
            info["total_slots"] = body.get("total_slots")
    elif flavour == "sglang":
        status, body = await probe.get("/get_model_info")
        if status == 200 and isinstance(body, dict):
            info["model_path"] = body.get("model_path")
    return info
