"""The target's tokenizer, for prompts sent as text of an exact token count.

Two sources with one interface, ``encode(text, special=True) -> list[int]`` giving the
ids *the server* will see (``special``: with the BOS or other tokens it adds):

* ``ServerTokenizer`` — ``POST /tokenize`` on the server under test (vLLM's shape, which
  the embedded engine serves too: ``{"model", "prompt", "add_special_tokens"}`` →
  ``{"tokens": [...], "count": n}``). Exact by construction: it is the server's own.
* ``LocalTokenizer`` — a ``tokenizer.json`` read with the ``tokenizers`` library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import httpx
import tokenizers

from workloads.errors import InputError


class Tokenizer(Protocol):
    def encode(self, text: str, *, special: bool = True) -> list[int]: ...


class LocalTokenizer:
    """A Hugging Face ``tokenizer.json`` (a file, or a model directory holding one)."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.is_file():
            raise InputError(
                "tokenizer", f"{path} not found", "give a tokenizer.json or its folder"
            )
        try:
            self._tok = tokenizers.Tokenizer.from_file(str(path))
        except Exception as exc:  # the library raises bare Exceptions for bad files
            raise InputError("tokenizer", f"cannot load {path}: {exc}") from None
        self.source = str(path)

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=special).ids


class ServerTokenizer:
    """The server's ``POST /tokenize`` (one keep-alive connection for all calls)."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        root = base_url.rstrip("/").removesuffix("/v1")
        self.url = f"{root}/tokenize"
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(headers=headers, timeout=timeout_s)
        self.source = self.url

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        body: dict[str, object] = {"prompt": text, "add_special_tokens": special}
        if self.model:
            body["model"] = self.model
        try:
            response = self._client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise InputError("tokenizer", f"{self.url} unreachable: {exc}") from None
        if response.status_code != 200:
            raise InputError(
                "tokenizer",
                f"{self.url} answered HTTP {response.status_code}",
                "does the server serve /tokenize? otherwise give a local tokenizer.json",
            )
        try:
            tokens = response.json()["tokens"]
        except (ValueError, KeyError, TypeError):
            raise InputError("tokenizer", f"{self.url} did not return a tokens list") from None
        return [int(t) for t in tokens]

    def close(self) -> None:
        self._client.close()


def load_tokenizer(
    source: str, *, model: str | None = None, api_key: str | None = None
) -> LocalTokenizer | ServerTokenizer:
    """A tokenizer from an ``http(s)://`` server URL or a local ``tokenizer.json`` path."""
    if source.startswith(("http://", "https://")):
        return ServerTokenizer(source, model=model, api_key=api_key)
    return LocalTokenizer(source)
