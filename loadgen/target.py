"""What the load generator talks to: a server's address, flavour, API and model.

The *flavour* is which server it is (it decides which extras a request may carry and
which cache-reset endpoint exists); the *API* is which request shape is sent. The
embedded engine speaks vLLM's API, so it has vLLM's capabilities.

An API key is held here for the ``Authorization`` header only: it is excluded from the
``repr`` and from :meth:`Target.describe`, which is what ``run.json`` records.

The endpoint's query string (``http://host/v1?api_key=K``: how Azure-style deployments and
some gateways take their key) is part of the address the user gave: it is kept in
``Target.query`` and sent with every request to the server (``Target.url``), and shown
only with its key-like values redacted (``runtime.redact``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from loadgen.flavours import NAMES, NATIVE_APIS, Capabilities, Flavour, flavour
from runfmt.codec import decode, frozen_map
from runfmt.run_sections import ServerInfo, TargetSection
from runtime import redact
from workloads.errors import InputError

#: The flavours a target may be (``loadgen.flavours`` owns them).
FLAVOURS = NAMES
#: The path each API sends its requests to: OpenAI's two, and each flavour's own.
REQUEST_PATHS = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
    **{api: f.capabilities.native_path for api, f in NATIVE_APIS.items()},
}
APIS = tuple(REQUEST_PATHS)
#: What a user may have typed after the server's root: an OpenAI SDK base URL ends in
#: ``/v1``; a copied request URL ends in the endpoint itself. Longest first.
_ROOT_SUFFIXES = tuple(
    sorted({*REQUEST_PATHS.values(), "/v1/models", "/v1"}, key=len, reverse=True)
)

#: Environment variables an API key is read from, first one set wins.
API_KEY_ENV = ("PREFILLSCOPE_API_KEY", "OPENAI_API_KEY")


def server_root(url: str) -> str:
    """The server's root URL from what a user types for ``--endpoint``.

    ``http://host:8000/v1`` (the OpenAI SDK's base URL), ``host:8000`` (no scheme: http),
    ``https://host/v1/chat/completions`` (a request URL) all give the root the server's
    paths hang from (``http://host:8000``); a path in front of ``/v1`` (a proxy's prefix)
    is kept, the query string is not (``split_endpoint`` keeps it). Anything that is not an
    http(s) address is bad input.
    """
    return split_endpoint(url)[0]


def split_endpoint(url: str) -> tuple[str, str]:
    """``(root, query)`` of what a user types for ``--endpoint``: the root as
    ``server_root`` gives it, and the query string (without its ``?``; ``""`` when none),
    which every request to the server carries (``Target.url``)."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
        port = parts.port  # raises on a port that is not a number
    except ValueError as exc:
        raise InputError("--endpoint", f"{url!r} is not a URL: {exc}", _EXAMPLE) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError("--endpoint", f"{url!r} is not an http(s) URL", _EXAMPLE)
    del port
    path = parts.path.rstrip("/")
    for suffix in _ROOT_SUFFIXES:
        if path.endswith(suffix):
            path = path.removesuffix(suffix)
            break
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), parts.query


def with_query(url: str, query: str) -> str:
    """``url`` with the endpoint's query string appended (after its own, if it has one)."""
    if not query:
        return url
    return f"{url}{'&' if '?' in url else '?'}{query}"


_EXAMPLE = "e.g. http://127.0.0.1:8000 (or …:8000/v1)"


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

    ``vocab_size`` bounds the token ids of token prompts; ``max_model_len`` is the
    longest prompt plus output the server takes (``None``: it does not say);
    ``discovered`` says where each of these facts came from. ``count_tokens`` (text →
    token count, e.g. a ``tokenizers`` tokenizer's) counts the tokens of a text delta
    when the stream says nothing better. ``query``: the endpoint's query string, sent
    with every request (a ``base_url`` given with one has it moved here).
    ``metrics_status``: the HTTP status detection's ``GET /metrics`` was answered with
    (``None``: detection did not ask, as with ``--backend``, or got no answer).
    """

    base_url: str
    flavour: str
    api: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    vocab_size: int | None = None
    count_tokens: Callable[[str], int] | None = field(default=None, repr=False)
    server_info: dict[str, Any] = field(default_factory=dict)
    max_model_len: int | None = None
    discovered: dict[str, str] = field(default_factory=dict)
    query: str = field(default="", repr=False)
    metrics_status: int | None = None

    def __post_init__(self) -> None:
        self.base_url, query = split_endpoint(self.base_url)
        self.query = self.query or query
        kind = flavour(self.flavour)
        if self.api not in APIS:
            raise InputError("api", f"unknown API {self.api!r}", _one_of(APIS))
        if self.api in NATIVE_APIS and self.api != kind.capabilities.native_api:
            raise InputError(
                "api", f"the {self.api} API needs a {self.api} server, not {self.flavour}"
            )

    @property
    def kind(self) -> Flavour:
        """The flavour's registry entry (``loadgen.flavours``)."""
        return flavour(self.flavour)

    @property
    def capabilities(self) -> Capabilities:
        return self.kind.capabilities

    def url(self, path: str) -> str:
        """The URL of ``path`` on the server, with the endpoint's query string."""
        return with_query(self.base_url + path, self.query)

    @property
    def shown_url(self) -> str:
        """The endpoint as the user gave it (its root and query), key-like values redacted:
        the one form of the address written or printed."""
        return redact.text(with_query(self.base_url, self.query))

    def paths(self) -> dict[str, str]:
        """The server paths a run uses, by what they are for (``run.json`` says them)."""
        used = {"models": "/v1/models", "requests": REQUEST_PATHS[self.api], "metrics": "/metrics"}
        kind = self.kind
        if kind.tokenize:
            used["tokenize"] = kind.tokenize  # text prompts' tokens (workloads.tokenizer)
        if kind.chat_template_path and self.api == "chat":
            used["chat_template"] = kind.chat_template_path
        if self.capabilities.reset_path:
            used["reset"] = self.capabilities.reset_path
        return used

    def headers(self) -> dict[str, str]:
        """Request headers, with the API key as a bearer token when there is one."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def describe(self) -> TargetSection:
        """What ``run.json`` records about the target. Never the API key."""
        return TargetSection(
            url=self.shown_url,
            paths=frozen_map(self.paths()),
            flavour=self.flavour,
            api=self.api,
            model=self.model,
            vocab_size=self.vocab_size,
            max_model_len=self.max_model_len,
            discovered=frozen_map(self.discovered),
            authenticated=bool(self.api_key),
            server_info=decode(ServerInfo, self.server_info),  # as the server said it
        )


def _one_of(names: tuple[str, ...]) -> str:
    return "use one of " + ", ".join(names)
