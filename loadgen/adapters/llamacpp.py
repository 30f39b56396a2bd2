"""llama.cpp's native ``POST /completion``.

The prompt may be token ids; ``n_predict`` caps the output; ``cache_prompt`` lets the
server reuse a slot's KV cache for a shared prefix. Each event is
``{"content", "tokens", "stop": false, "tokens_predicted", "tokens_evaluated", …}`` with
a cumulative ``tokens_predicted``; the last has ``"stop": true``, ``stop_type``
(``limit`` / ``eos`` / ``word``) and ``timings``, whose ``cache_n`` is the number of
prompt tokens served from the cache. There is no ``[DONE]``: the ``stop`` event ends the
stream. ``tokens`` holds the generated ids only when ``return_tokens`` is asked for.
(See ``tests/fixtures/llamacpp/completion-native-stream.sse``.)
"""

from __future__ import annotations

from typing import Any

from loadgen.adapters.base import Adapter, EventStream, Outgoing
from workloads.plan import RequestSpec

_FINISH = {"limit": "length", "eos": "stop", "word": "stop"}


class LlamaCppStream(EventStream):
    __slots__ = ()
    intermediate = b'"stop":false'
    counter_key = b'"tokens_predicted":'

    def on_object(self, obj: dict[str, Any]) -> int:
        ids = obj.get("tokens")
        self.keep_ids(ids)
        self.keep_text(obj.get("content"))
        if obj.get("stop"):
            self.done = True
            stop_type = obj.get("stop_type")
            self.finish_reason = _FINISH.get(stop_type, stop_type)
            timings = obj.get("timings")
            cached = timings.get("cache_n") if isinstance(timings, dict) else None
            self.set_usage(obj.get("tokens_evaluated"), obj.get("tokens_predicted"), cached)
        predicted = obj.get("tokens_predicted")
        if isinstance(predicted, int):
            return self.from_counter(predicted)
        if isinstance(ids, list):
            return self.from_ids(ids)
        return self.from_text(obj.get("content"))


class LlamaCppAdapter(Adapter):
    path = "/completion"

    def check(self, spec: RequestSpec) -> str | None:
        if spec.lora:
            return "llama.cpp's /completion cannot select a LoRA adapter by name"
        if self.params.logprobs:
            return "logprobs are not collected from llama.cpp's /completion"
        return super().check(spec)

    def body(self, out: Outgoing) -> dict[str, Any]:
        spec, prompt = out.spec, out.prompt
        body: dict[str, Any] = {
            "prompt": prompt,
            "n_predict": spec.max_tokens,
            "stream": True,
            "cache_prompt": True,
            **self.params.sampling(),
        }
        if out.want_ids:
            body["return_tokens"] = True
        return body

    def new_stream(self, want_ids: bool, want_text: bool = False) -> LlamaCppStream:
        return LlamaCppStream(**self.stream_kwargs(want_ids, want_text))
