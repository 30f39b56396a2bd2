"""What the load generator talks to: a server's address, flavour, API and model.

The *flavour* is which server it is (it decides which extras a request may carry and
which cache-reset endpoint exists); the *API* is which request shape is sent. The
embedded engine speaks vLLM's API, so it has vLLM's capabilities.

An API key is held here for the ``Authorization`` header only: it is excluded from the
``repr`` and from :meth:`Target.describe`, which is what ``run.json`` records.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workloads.errors import InputError

FLAVOURS = ("vllm", "sglang", "llamacpp", "openai", "embedded")
APIS = ("completions", "chat", "sglang", "llamacpp")

#: Environment variables an API key is read from, first one set wins.
API_KEY_ENV = ("PREFILLSCOPE_API_KEY", "OPENAI_API_KEY")


@dataclass(frozen=True)
class Capabilities:
    """Request extras and endpoints a flavour is known to accept."""

    cache_salt: bool = False
    continuous_usage: bool = False
    return_token_ids: bool = False
    ignore_eos: bool = False
    reset_path: str | None = None
    native_api: str | None = None


CAPABILITIES: dict[str, Capabilities] = {
    "vllm": Capabilities(True, True, True, True, "/reset_prefix_cache"),
    "embedded": Capabilities(True, True, True, True, "/reset_prefix_cache"),
    "sglang": Capabilities(True, True, False, True, "/flush_cache", native_api="sglang"),
    "llamacpp": Capabilities(False, False, False, True, None, native_api="llamacpp"),
    "openai": Capabilities(),
}

#: The API each flavour is driven through unless told otherwise: the one whose stream
#: says how many tokens each chunk carried and how many prompt tokens were cached.
DEFAULT_API = {
    "vllm": "completions",
    "embedded": "completions",
    "sglang": "sglang",
    "llamacpp": "llamacpp",
    "openai": "completions",
}


def api_key_from_env() -> str | None:
    """The API key from the environment (``PREFILLSCOPE_API_KEY``, then ``OPENAI_API_KEY``)."""
    for name in API_KEY_ENV:
        value = os.environ.get(name)
        if value:
            return value
    return None


@dataclass
class Target:
    """One server under test.

    ``vocab_size`` bounds the token ids of token prompts; ``count_tokens`` (text → token
    count, e.g. a ``tokenizers`` tokenizer's) counts the tokens of a text delta when the
    stream says nothing better.
    """

    base_url: str
    flavour: str
    api: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    vocab_size: int | None = None
    count_tokens: Callable[[str], int] | None = field(default=None, repr=False)
    server_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        if self.flavour not in FLAVOURS:
            raise InputError("--backend", f"unknown backend {self.flavour!r}", _one_of(FLAVOURS))
        if self.api not in APIS:
            raise InputError("api", f"unknown API {self.api!r}", _one_of(APIS))
        native = self.capabilities.native_api
        if self.api in ("sglang", "llamacpp") and self.api != native:
            raise InputError(
                "api", f"the {self.api} API needs a {self.api} server, not {self.flavour}"
            )

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES[self.flavour]

    def url(self, path: str) -> str:
        return self.base_url + path

    def headers(self) -> dict[str, str]:
        """Request headers, with the API key as a bearer token when there is one."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def describe(self) -> dict[str, Any]:
        """What ``run.json`` records about the target. Never the API key."""
        return {
            "url": self.base_url,
            "flavour": self.flavour,
            "api": self.api,
            "model": self.model,
            "vocab_size": self.vocab_size,
            "authenticated": bool(self.api_key),
            "server_info": self.server_info,
        }


def _one_of(names: tuple[str, ...]) -> str:
    return "use one of " + ", ".join(names)
