"""OpenAI ``/v1/completions`` and ``/v1/chat/completions``, with vLLM's extras.

Extras are sent only to flavours known to accept them (``Target.capabilities``):
``cache_salt``, ``return_token_ids``, ``ignore_eos`` and
``stream_options.continuous_usage_stats`` (a usage object on every event, whose
cumulative ``completion_tokens`` says exactly how many tokens each event carried).
``stream_options.include_usage`` is standard and always asked for: its final event
carries the prompt, completion and cached token counts.

Usage on an event is only a per-event token count when it was asked for as continuous
usage: llama.cpp, for one, puts the whole request's usage on its last choice event.
"""

from __future__ import annotations

from typing import Any

from loadgen.adapters.base import Adapter, EventStream, Outgoing
from workloads.tokenizer import chat_messages


class OpenAIStream(EventStream):
    """The events of a completions (``text``) or chat (``delta.content``) stream."""

    __slots__ = ("_chat", "_continuous")
    intermediate = b'"finish_reason":null'
    counter_key = b'"completion_tokens":'

    def __init__(self, *, chat: bool, continuous: bool, **kwargs: Any) -> None:
        super().__init__(fast=continuous, **kwargs)
        self._chat = chat
        self._continuous = continuous

    def on_object(self, obj: dict[str, Any]) -> int:
        usage = obj.get("usage")
        completion = None
        if isinstance(usage, dict):
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            completion = usage.get("completion_tokens")
            self.set_usage(usage.get("prompt_tokens"), completion, cached)
        timings = obj.get("timings")
        if self.cached_tokens is None and isinstance(timings, dict):
            self.set_usage(None, None, timings.get("cache_n"))  # llama.cpp's own report
        choices = obj.get("choices")
        if not choices or not isinstance(choices, list):
            return 0
        choice = choices[0]
        finish = choice.get("finish_reason")
        if finish:
            self.finish_reason = finish
        ids = choice.get("token_ids")
        self.keep_ids(ids)
        self._keep_logprobs(choice.get("logprobs"))
        if self._chat:
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else None
        else:
            text = choice.get("text")
        self.keep_text(text)
        if (
            self._continuous
            and isinstance(completion, int)
            and (finish is None or self.method == "usage" or self.tokens == 0)
        ):
            return self.from_counter(completion)
        if isinstance(ids, list):
            return self.from_ids(ids)
        return self.from_text(text)

    def _keep_logprobs(self, logprobs: Any) -> None:
        if self.logprobs is None or not isinstance(logprobs, dict):
            return
        if self._chat:
            content = logprobs.get("content") or []
            self.logprobs.extend(float(c["logprob"]) for c in content if "logprob" in c)
        else:
            values = logprobs.get("token_logprobs") or []
            self.logprobs.extend(float(v) for v in values if v is not None)


class OpenAIAdapter(Adapter):
    """Completions (prompt as token ids or text) or chat (a single user message)."""

    def __init__(self, target: Any, params: Any) -> None:
        super().__init__(target, params)
        self.chat = target.api == "chat"
        self.path = "/v1/chat/completions" if self.chat else "/v1/completions"
        self.takes_token_ids = not self.chat

    def body(self, out: Outgoing) -> dict[str, Any]:
        spec, prompt = out.spec, out.prompt
        caps, params = self.caps, self.params
        body: dict[str, Any] = {"model": spec.lora or self.target.model}
        if self.chat:
            body["messages"] = list(spec.messages or chat_messages(str(prompt)))
        else:
            body["prompt"] = prompt
        body["max_tokens"] = spec.max_tokens
        body["stream"] = True
        options: dict[str, Any] = {"include_usage": True}
        if caps.continuous_usage:
            options["continuous_usage_stats"] = True
        body["stream_options"] = options
        body.update(params.sampling(caps.ignore_eos))
        if out.cache_salt and caps.cache_salt:
            body["cache_salt"] = out.cache_salt
        if out.want_ids and caps.return_token_ids:
            body["return_token_ids"] = True
        if params.logprobs:
            if self.chat:
                body["logprobs"] = True
                body["top_logprobs"] = 0
            else:
                body["logprobs"] = 0
        return body

    def new_stream(self, want_ids: bool, want_text: bool = False) -> OpenAIStream:
        return OpenAIStream(
            chat=self.chat,
            continuous=self.caps.continuous_usage,
            **self.stream_kwargs(want_ids, want_text),
        )
