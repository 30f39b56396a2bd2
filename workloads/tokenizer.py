"""The target's tokenizer, for prompts sent as text of an exact token count.

Two sources with one interface, ``encode(text, special=True) -> list[int]`` giving the
ids *the server* will see (``special``: with the BOS or other tokens it adds), and
``encode_chat(messages) -> list[int]`` giving the ids a chat request's messages become
once the model's chat template is applied with the generation prompt (the ids the
server's prefix cache sees for a ``/v1/chat/completions`` request):

* ``ServerTokenizer`` — ``POST /tokenize`` on the server under test, vLLM's shape, which
  the embedded engine serves too: ``{"model", "prompt", "add_special_tokens"}`` or
  ``{"model", "messages", "add_generation_prompt"}`` (``add_special_tokens`` left at
  vLLM's chat default, false, as in a chat completion) → ``{"count", "max_model_len",
  "tokens"}``. Exact by construction: it is the server's own. SGLang's ``/tokenize``
  has the same shape for text, without messages (``PromptTokenizer``); llama.cpp's
  takes ``{"content", "add_special"}`` and applies chat templates at
  ``/apply-template`` (``LlamaCppTokenizer``). ``SERVED_TOKENIZERS`` maps each request
  shape (a flavour's ``tokenize_dialect``) to its tokenizer.
* ``LocalTokenizer`` — a model's ``tokenizer.json`` read with the ``tokenizers`` library:
  a model folder, the file itself, or the name of a Hugging Face model already in the
  local cache (nothing is downloaded). Chat messages go through the ``chat_template`` of
  the folder's ``tokenizer_config.json`` (rendered with jinja2, as Hugging Face does).

``httpx`` and ``tokenizers`` are imported by the tokenizer that uses them: a run of
token-id prompts loads neither.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Protocol

from workloads.errors import InputError

Messages = list[dict[str, Any]]


def chat_messages(text: str) -> Messages:
    """The messages a text prompt is sent as through a chat API: one user message."""
    return [{"role": "user", "content": text}]


class Tokenizer(Protocol):
    def encode(self, text: str, *, special: bool = True) -> list[int]: ...


class ChatTokenizer(Tokenizer, Protocol):
    def encode_chat(self, messages: Messages) -> list[int]: ...


def hf_cache_dir() -> Path:
    """Where Hugging Face keeps downloaded models (``HF_HUB_CACHE``, ``HF_HOME``/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home) / "hub"


def cached_model_dir(name: str) -> Path | None:
    """The snapshot folder of model ``org/name`` in the local Hugging Face cache."""
    repo = hf_cache_dir() / ("models--" + name.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file() and (snapshots / ref.read_text().strip()).is_dir():
        return snapshots / ref.read_text().strip()
    found = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def resolve_tokenizer_file(source: str | Path) -> Path:
    """The ``tokenizer.json`` that ``source`` names: the file, a model folder holding it,
    or a model name found in the local Hugging Face cache."""
    path = Path(source)
    if not path.exists() and isinstance(source, str) and "/" in source.strip("/"):
        cached = cached_model_dir(source.strip("/"))
        path = cached if cached is not None else path
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise InputError(
            "--tokenizer",
            f"{source} not found (no file, folder or locally cached model of that name)",
            "give a model folder, its tokenizer.json, or a model in the Hugging Face cache",
        )
    return path


class LocalTokenizer:
    """A Hugging Face tokenizer: a model folder, its ``tokenizer.json``, or a cached model."""

    def __init__(self, source: str | Path) -> None:
        import tokenizers

        path = resolve_tokenizer_file(source)
        try:
            self._tok = tokenizers.Tokenizer.from_file(str(path))
        except Exception as exc:  # the library raises bare Exceptions for bad files
            raise InputError("--tokenizer", f"cannot load {path}: {exc}") from None
        self.source = str(path)
        self.config = _read_config(path.parent / "tokenizer_config.json")

    @property
    def vocab_size(self) -> int:
        """Ids this tokenizer can produce (added tokens included)."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=special).ids

    def encode_chat(self, messages: Messages) -> list[int]:
        """``messages`` through the model's chat template, with the generation prompt,
        tokenized without added special tokens (the template writes its own)."""
        template = self.config.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if not isinstance(template, str):
            raise InputError(
                "--tokenizer",
                f"{self.source}: no chat_template in tokenizer_config.json",
                "use the chat API against a server that serves /tokenize, or another model",
            )
        return self.encode(render_chat_template(template, messages, self.config), special=False)


class HttpTokenizer:
    """A tokenizer the server under test serves over HTTP (one keep-alive connection)."""

    #: The path that tokenizes text; what ``source`` names.
    path = "/tokenize"

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        query: str = "",
    ) -> None:
        """``query``: the endpoint's query string (``api_key=K``), sent with every request."""
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.url = f"{self.root}{self.path}"
        self.model = model
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(headers=headers, params=query or None, timeout=timeout_s)
        self.source = self.url

    def _post(self, path: str, body: dict[str, object], field: str) -> Any:
        """``body`` posted to ``path``; the answer's ``field``, or one ``InputError``."""
        import httpx

        url = self.root + path
        try:
            response = self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise InputError("tokenizer", f"{url} unreachable: {exc}") from None
        if response.status_code != 200:
            raise InputError(
                "tokenizer",
                f"{url} answered HTTP {response.status_code}",
                f"does the server serve {path}? otherwise give a local tokenizer.json",
            )
        try:
            return response.json()[field]
        except (ValueError, KeyError, TypeError):
            raise InputError("tokenizer", f"{url} did not return {field!r}") from None

    def _tokens(self, body: dict[str, object]) -> list[int]:
        tokens = self._post(self.path, body, "tokens")
        if not isinstance(tokens, list):
            raise InputError("tokenizer", f"{self.url} did not return a tokens list")
        return [int(t) for t in tokens]

    def close(self) -> None:
        self._client.close()


class PromptTokenizer(HttpTokenizer):
    """``POST /tokenize`` in vLLM's shape for text only: ``{"model", "prompt",
    "add_special_tokens"}`` → ``{"tokens", …}`` (SGLang serves this; its ``/tokenize``
    takes no chat messages)."""

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        body: dict[str, object] = {"prompt": text, "add_special_tokens": special}
        return self._tokens(body | ({"model": self.model} if self.model else {}))


class ServerTokenizer(PromptTokenizer):
    """vLLM's ``POST /tokenize`` (the embedded engine's too), which also takes chat
    messages and applies the model's chat template: ``{"model", "messages",
    "add_generation_prompt"}``."""

    def encode_chat(self, messages: Messages) -> list[int]:
        body: dict[str, object] = {"messages": messages, "add_generation_prompt": True}
        return self._tokens(body | ({"model": self.model} if self.model else {}))


class LlamaCppTokenizer(HttpTokenizer):
    """llama.cpp's server: ``POST /tokenize`` ``{"content", "add_special"}`` →
    ``{"tokens"}``; chat messages through ``POST /apply-template`` ``{"messages"}`` →
    ``{"prompt"}``, then tokenized with the special tokens, as its chat completions do."""

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        return self._tokens({"content": text, "add_special": special})

    def encode_chat(self, messages: Messages) -> list[int]:
        prompt = self._post("/apply-template", {"messages": messages}, "prompt")
        if not isinstance(prompt, str):
            raise InputError("tokenizer", f"{self.root}/apply-template did not return a prompt")
        return self.encode(prompt, special=True)


#: The served tokenizer by the request shape its ``/tokenize`` takes (each flavour's
#: ``tokenize_dialect`` in ``loadgen.flavours``; ``bench`` uses it for text prompts):
#: ``messages`` (vLLM's shape, chat messages too), ``prompt`` (text only), ``content``
#: (llama.cpp's).
SERVED_TOKENIZERS: dict[str, type[PromptTokenizer] | type[LlamaCppTokenizer]] = {
    "messages": ServerTokenizer,
    "prompt": PromptTokenizer,
    "content": LlamaCppTokenizer,
}


def load_tokenizer(
    source: str, *, model: str | None = None, api_key: str | None = None
) -> LocalTokenizer | ServerTokenizer:
    """A tokenizer from an ``http(s)://`` server URL, else a model folder, a
    ``tokenizer.json`` or a locally cached Hugging Face model name."""
    if source.startswith(("http://", "https://")):
        return ServerTokenizer(source, model=model, api_key=api_key)
    return LocalTokenizer(source)


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def _token_text(value: Any) -> str:
    """A special token of ``tokenizer_config.json``: a string or ``{"content": …}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def render_chat_template(template: str, messages: Messages, config: dict[str, Any]) -> str:
    """A Hugging Face chat template rendered as ``apply_chat_template`` does (sandboxed
    jinja2, ``raise_exception`` available, the special tokens as variables)."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(
            messages=messages,
            add_generation_prompt=True,
            bos_token=_token_text(config.get("bos_token")),
            eos_token=_token_text(config.get("eos_token")),
        )
    except TemplateError as exc:
        raise InputError("--tokenizer", f"the chat template failed: {exc}") from None
