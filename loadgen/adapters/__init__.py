"""Request builders and stream readers, one module per API: pick one with :func:`adapter_for`."""

from __future__ import annotations

from loadgen.adapters.base import Adapter, EventStream, Outgoing, RequestParams
from loadgen.adapters.llamacpp import LlamaCppAdapter
from loadgen.adapters.openai import OpenAIAdapter
from loadgen.adapters.sglang import SGLangAdapter
from loadgen.target import Target

__all__ = ["Adapter", "EventStream", "Outgoing", "RequestParams", "adapter_for"]

_BY_API: dict[str, type[Adapter]] = {
    "completions": OpenAIAdapter,
    "chat": OpenAIAdapter,
    "sglang": SGLangAdapter,
    "llamacpp": LlamaCppAdapter,
}


def adapter_for(target: Target, params: RequestParams | None = None) -> Adapter:
    """The adapter for the target's API."""
    return _BY_API[target.api](target, params or RequestParams())
