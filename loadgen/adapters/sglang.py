"""SGLang's native ``POST /generate``: token ids in, a stream of cumulative outputs back.

The request carries the prompt as ``input_ids`` (or ``text``) and ``sampling_params``;
``extra_key`` is SGLang's per-request cache namespace (what ``cache_salt`` is to vLLM)
and ``lora_path`` names an adapter. Each event is
``{"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
"completion_tokens", "cached_tokens", …}}``, then ``data: [DONE]``.

By default ``text`` and ``output_ids`` are *cumulative* (the whole output so far); a
server started with ``--incremental-streaming-output`` sends deltas instead. The
cumulative ``meta_info.completion_tokens`` tells which: ids are cumulative exactly when
their count equals it. ``finish_reason`` is ``null`` or an object such as
``{"type": "length", "length": 16}``; ``{"type": "abort", "message": …}`` is a failure.
An in-stream failure is ``{"error": {"message": …}}``.
"""

from __future__ import annotations

from typing import Any

from loadgen.adapters.base import Adapter, EventStream, Outgoing, short


class SGLangStream(EventStream):
    __slots__ = ("_seen",)
    intermediate = b'"finish_reason":null'
    counter_key = b'"completion_tokens":'

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._seen = {"output_ids": 0, "text": 0}  # length of each cumulative field so far

    def on_object(self, obj: dict[str, Any]) -> int:
        meta = obj.get("meta_info")
        meta = meta if isinstance(meta, dict) else {}
        completion = meta.get("completion_tokens")
        self.set_usage(meta.get("prompt_tokens"), completion, meta.get("cached_tokens"))
        self._finish(meta.get("finish_reason"))
        ids = obj.get("output_ids")
        cumulative = isinstance(ids, list) and (
            len(ids) == completion if isinstance(completion, int) else True
        )
        new_ids = self._new(obj, "output_ids", list, cumulative)
        self.keep_ids(new_ids)
        text = self._new(obj, "text", str, cumulative)
        self.keep_text(text)
        self._keep_logprobs(meta.get("output_token_logprobs"), cumulative)
        if isinstance(completion, int):
            return self.from_counter(completion)
        if new_ids is not None:
            return self.from_ids(new_ids)
        return self.from_text(text)

    def _finish(self, reason: Any) -> None:
        if not reason:
            return
        kind = reason.get("type") if isinstance(reason, dict) else str(reason)
        self.finish_reason = kind
        if kind == "abort":
            message = reason.get("message") if isinstance(reason, dict) else None
            self.error = short(message or "request aborted by the server")

    def _new(self, obj: dict[str, Any], key: str, kind: type, cumulative: bool) -> Any:
        """What ``obj[key]`` adds to the output: all of it, or past what was seen."""
        value = obj.get(key)
        if not isinstance(value, kind):
            return None
        if not cumulative:
            return value
        new = value[self._seen[key] :]
        self._seen[key] = len(value)
        return new

    def _keep_logprobs(self, entries: Any, cumulative: bool) -> None:
        """``output_token_logprobs`` entries are ``[logprob, token_id, text]``."""
        if self.logprobs is None or not isinstance(entries, list):
            return
        new = entries[len(self.logprobs) :] if cumulative else entries
        self.logprobs.extend(float(e[0]) for e in new if e and e[0] is not None)


class SGLangAdapter(Adapter):
    path = "/generate"

    def body(self, out: Outgoing) -> dict[str, Any]:
        spec, prompt = out.spec, out.prompt
        params = self.params
        sampling = {"max_new_tokens": spec.max_tokens, **params.sampling()}
        body: dict[str, Any] = {
            ("text" if isinstance(prompt, str) else "input_ids"): prompt,
            "sampling_params": sampling,
            "stream": True,
        }
        if out.cache_salt:
            body["extra_key"] = out.cache_salt
        if spec.lora:
            body["lora_path"] = spec.lora
        if params.logprobs:
            body["return_logprob"] = True
        return body

    def new_stream(self, want_ids: bool, want_text: bool = False) -> SGLangStream:
        return SGLangStream(**self.stream_kwargs(want_ids, want_text))
