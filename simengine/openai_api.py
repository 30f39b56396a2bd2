"""Parsing and validating OpenAI-style request bodies, and vLLM-shaped errors.

Everything here is pure (no I/O): a JSON body goes in, a fully resolved
:class:`GenerationRequest` (the engine request — prompt token ids, limits, sampling,
cache scope — plus the streaming options) or an :class:`ApiError` comes out. Keeping the
rules in one place is what lets every endpoint reject bad input the same way vLLM does —
the same status, the same ``{"error": {"message", "type", "param", "code"}}`` body —
before anything reaches the engine, so a bad request can never disturb the requests
already running.

The chat template is deliberately simple and documented, since the engine has no real
model: ``<s>`` then, for each message, ``<|{role}|>\\n{content}\\n``, then
``<|assistant|>\\n`` when a generation prompt is wanted, tokenized with the built-in
tokenizer. Message content may be a string or a list of ``{"type": "text", "text": …}``
parts (joined with newlines).
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass
from typing import Any

from simengine.core import EngineRequest
from simengine.tokenizer import BOS_ID, Tokenizer
from workloads.prefix import CacheScope

#: The most top logprobs a request may ask for (vLLM's default ``--max-logprobs``).
MAX_LOGPROBS = 20
#: ``max_tokens`` of a completion that does not say (the OpenAI and vLLM default).
DEFAULT_COMPLETION_MAX_TOKENS = 16

_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}


class ApiError(Exception):
    """A request the server refuses, rendered as vLLM's OpenAI-style error body."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": _ERROR_TYPES.get(self.status, "BadRequestError"),
                "param": self.param,
                "code": self.status,
            }
        }


def _invalid(param: str, problem: str, value: object) -> ApiError:
    return ApiError(400, f"{problem} (parameter={param}, value={value})", param)


@dataclass(frozen=True)
class ServedModel:
    """What a request is checked against: the model's public name, limits and tokenizer.

    ``scope_model`` is the model identity cache scopes carry (the preset, not the alias
    clients use), so renaming the served model never changes which KV blocks match.
    """

    name: str
    max_model_len: int
    tokenizer: Tokenizer
    scope_model: str = ""
    #: LoRA adapters a request may name as its model (its blocks are scoped by it).
    loras: tuple[str, ...] = ()
    #: Whether a request's ``cache_salt`` scopes its blocks (``EngineConfig.cache_scope``).
    honour_salts: bool = True

    def scope(self, body: dict[str, Any]) -> CacheScope:
        """The cache identity of a request: the model, its LoRA adapter, its salt."""
        salt = _cache_salt(body)  # checked whether honoured or not
        lora = body.get("model") if body.get("model") in self.loras else None
        return CacheScope(self.scope_model, lora, salt if self.honour_salts else None)


@dataclass(frozen=True)
class GenerationRequest:
    """A validated completion or chat request: the engine request plus how to answer it.

    ``engine.logprobs`` is the number of top logprobs per token (0: the chosen token's
    only; ``None``: no logprobs).
    """

    engine: EngineRequest
    chat: bool
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    return_token_ids: bool = False


# -- bodies and fields ------------------------------------------------------------------
class _NonFinite(ValueError):
    pass


def _no_constant(name: str) -> float:
    raise _NonFinite(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(f"{text} is out of range for a number")
    return value


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """The request's JSON object, or a 400 saying why it is not one.

    NaN, Infinity and numbers beyond a double (Python's json reads them) are refused;
    so is nesting too deep to decode, as a 400 rather than an internal error.
    """
    try:
        body = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except _NonFinite as exc:
        raise ApiError(400, f"Invalid JSON in request body: {exc}") from None
    except RecursionError:
        raise ApiError(400, "Invalid JSON in request body: nested too deeply") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"Invalid JSON in request body: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def _int(body: dict[str, Any], name: str, *, minimum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if type(value) is not int:
        raise _invalid(name, f"{name} must be an integer", value)
    if minimum is not None and value < minimum:
        raise _invalid(name, f"{name} must be at least {minimum}, got {value}.", value)
    return value


def _bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _invalid(name, f"{name} must be a boolean", value)
    return value


def _temperature(body: dict[str, Any]) -> float:
    value = body.get("temperature")
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise _invalid("temperature", "temperature must be a non-negative number", value)
    return float(value)


def _cache_salt(body: dict[str, Any]) -> str | None:
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise _invalid(
            "cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided.", salt
        )
    return salt


def check_model(body: dict[str, Any], served: ServedModel) -> None:
    """404 unless the request names the served model (or names none)."""
    model = body.get("model")
    if model is not None and model != served.name and model not in served.loras:
        raise ApiError(
            404,
            f"The model `{model}` does not exist. Valid aliases: "
            f"{', '.join((served.name, *served.loras))}.",
            "model",
        )


# -- prompts ----------------------------------------------------------------------------
def _token_ids(value: list[Any], served: ServedModel, param: str) -> list[int]:
    bad = served.tokenizer.first_invalid(value)
    if bad is not None:
        raise _invalid(
            param,
            f"Token id {bad} is out of vocabulary (vocab_size={served.tokenizer.vocab_size}).",
            bad,
        )
    return value


def completion_prompt_ids(
    body: dict[str, Any],
    served: ServedModel,
    *,
    add_special_tokens: bool = True,
    generating: bool = False,
) -> list[int]:
    """The prompt as token ids: text is tokenized (with BOS), an id list is taken as is.

    A one-element batch (``["text"]`` or ``[[ids]]``) is unwrapped; larger batches are
    refused because the embedded engine serves one choice per request. ``generating``:
    an id list as long as ``max_model_len`` is refused before its ids are checked (a
    body of a million ids is not scanned to be refused for its length).
    """
    prompt = body.get("prompt")
    if prompt is None:
        raise ApiError(400, "Field required: prompt (parameter=prompt)", "prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise _invalid("prompt", "The prompt cannot be empty.", '""')
        return served.tokenizer.encode(prompt, add_bos=add_special_tokens)
    if isinstance(prompt, list):
        if not prompt:
            raise _invalid("prompt", "The prompt cannot be empty.", "[]")
        if generating and len(prompt) >= served.max_model_len:
            raise _prompt_too_long(len(prompt), served.max_model_len)
        if any(isinstance(p, str | list) for p in prompt):
            raise _invalid("prompt", "Only a single prompt per request is supported.", "batch")
        return _token_ids(prompt, served, "prompt")
    raise _invalid(
        "prompt", "prompt must be a string or a list of token ids", type(prompt).__name__
    )


def _message_text(message: Any, index: int) -> tuple[str, str]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise _invalid("messages", f"messages[{index}] must be an object with a role", message)
    content = message.get("content")
    if content is None:
        return message["role"], ""
    if isinstance(content, str):
        return message["role"], content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return message["role"], "\n".join(p["text"] for p in content)
    raise _invalid("messages", f"messages[{index}].content must be text", "non-text content")


def chat_prompt_ids(
    body: dict[str, Any], served: ServedModel, *, add_generation_prompt: bool = True
) -> list[int]:
    """The chat template (see the module docstring) applied to ``messages``, as token ids."""
    messages = body.get("messages")
    if messages is None:
        raise ApiError(400, "Field required: messages (parameter=messages)", "messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages", "messages must be a non-empty list", messages)
    parts = []
    for i, message in enumerate(messages):
        role, text = _message_text(message, i)
        parts.append(f"<|{role}|>\n{text}\n")
    if add_generation_prompt:
        parts.append("<|assistant|>\n")
    return [BOS_ID, *served.tokenizer.encode("".join(parts))]


# -- generation requests ----------------------------------------------------------------
def _prompt_too_long(prompt_len: int, max_len: int) -> ApiError:
    return ApiError(
        400,
        f"This model's maximum context length is {max_len} tokens. However, your prompt "
        f"contains {prompt_len} input tokens, which exceeds this limit even without any "
        "output tokens. Please reduce the length of the input prompt. "
        f"(parameter=input_tokens, value={prompt_len})",
        "input_tokens",
    )


def _max_tokens(requested: int | None, default: int, prompt_len: int, max_len: int) -> int:
    if requested is not None and requested > max_len:
        raise _invalid(
            "max_tokens",
            f"max_tokens={requested} cannot be greater than max_model_len={max_len}. "
            "Please request fewer output tokens.",
            requested,
        )
    if prompt_len >= max_len:
        raise _prompt_too_long(prompt_len, max_len)
    if requested is None:
        return min(default, max_len - prompt_len)
    if prompt_len + requested > max_len:
        raise _invalid(
            "max_tokens",
            f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This model's "
            f"maximum context length is {max_len} tokens and your request has {prompt_len} "
            f"input tokens ({requested} > {max_len} - {prompt_len}).",
            requested,
        )
    return requested


def _stream_options(body: dict[str, Any], stream: bool) -> tuple[bool, bool]:
    options = body.get("stream_options")
    if options is None:
        return False, False
    if not stream:
        raise _invalid(
            "stream_options", "Stream options can only be defined when `stream=True`.", options
        )
    if not isinstance(options, dict):
        raise _invalid("stream_options", "stream_options must be an object", options)
    include = _bool(options, "include_usage")
    return include, include and _bool(options, "continuous_usage_stats")


def _logprob_count(body: dict[str, Any], name: str) -> int | None:
    count = _int(body, name, minimum=0)
    if count is not None and count > MAX_LOGPROBS:
        raise _invalid(name, f"{name} must be at most {MAX_LOGPROBS}", count)
    return count


def _n(body: dict[str, Any]) -> None:
    n = _int(body, "n", minimum=1)
    if n is not None and n != 1:
        raise _invalid("n", "Only n=1 is supported by the embedded engine.", n)


def parse_completion(body: dict[str, Any], served: ServedModel) -> GenerationRequest:
    """Validate a ``/v1/completions`` body (logprobs: an int, the number of top logprobs)."""
    check_model(body, served)
    _n(body)
    ids = completion_prompt_ids(body, served, generating=True)
    logprobs = _logprob_count(body, "logprobs")
    requested = _int(body, "max_tokens", minimum=1)
    default = DEFAULT_COMPLETION_MAX_TOKENS
    return _generation(body, served, False, ids, requested, default, logprobs)


def parse_chat(body: dict[str, Any], served: ServedModel) -> GenerationRequest:
    """Validate a ``/v1/chat/completions`` body (``logprobs`` bool + ``top_logprobs`` int)."""
    check_model(body, served)
    _n(body)
    ids = chat_prompt_ids(body, served)
    top = _logprob_count(body, "top_logprobs")
    wants = _bool(body, "logprobs")
    if top and not wants:
        raise _invalid("top_logprobs", "when using `top_logprobs`, `logprobs` must be true", top)
    requested = _int(body, "max_completion_tokens", minimum=1)
    if requested is None:
        requested = _int(body, "max_tokens", minimum=1)
    default = served.max_model_len
    logprobs = (top or 0) if wants else None
    return _generation(body, served, True, ids, requested, default, logprobs)


def _generation(
    body: dict[str, Any],
    served: ServedModel,
    chat: bool,
    ids: list[int],
    requested: int | None,
    default_max: int,
    logprobs: int | None,
) -> GenerationRequest:
    stream = _bool(body, "stream")
    include_usage, continuous = _stream_options(body, stream)
    engine = EngineRequest(
        request_id=f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:16]}",
        prompt_token_ids=ids,
        max_tokens=_max_tokens(requested, default_max, len(ids), served.max_model_len),
        scope=served.scope(body),
        ignore_eos=_bool(body, "ignore_eos"),
        temperature=_temperature(body),
        seed=_int(body, "seed"),
        logprobs=logprobs,
    )
    return GenerationRequest(
        engine=engine,
        chat=chat,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        return_token_ids=_bool(body, "return_token_ids"),
    )


# -- tokenizer endpoints ----------------------------------------------------------------
def parse_tokenize(body: dict[str, Any], served: ServedModel) -> list[int]:
    """``/tokenize``: a ``prompt`` (BOS added unless ``add_special_tokens`` is false) or
    chat ``messages`` (through the chat template, as the chat endpoint would)."""
    check_model(body, served)
    if "messages" in body:
        add_gen = body.get("add_generation_prompt", True)
        return chat_prompt_ids(body, served, add_generation_prompt=add_gen is not False)
    add_special = body.get("add_special_tokens", True)
    return completion_prompt_ids(body, served, add_special_tokens=add_special is not False)


def parse_detokenize(body: dict[str, Any], served: ServedModel) -> list[int]:
    """``/detokenize``: the ``tokens`` list, every id checked against the vocabulary."""
    check_model(body, served)
    tokens = body.get("tokens")
    if not isinstance(tokens, list):
        raise ApiError(400, "Field required: tokens (parameter=tokens)", "tokens")
    return _token_ids(tokens, served, "tokens")
