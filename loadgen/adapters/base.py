"""What every API adapter shares: request parameters and the per-request stream reader.

An adapter knows one API's request shape (:meth:`Adapter.body`) and how to read its
stream (:meth:`Adapter.new_stream`). The reader, an :class:`EventStream`, turns raw bytes
into uniform facts: how many tokens each read carried, the usage the server reported,
the finish reason, and what went wrong (an in-stream error event, a payload that is not
JSON, a stream that never said it was done).

Counting tokens, best source first (the name goes to ``RequestRecord.token_count_method``):
``usage`` (a cumulative completion-token count on every event: vLLM's
``continuous_usage_stats``, SGLang's ``meta_info``, llama.cpp's ``tokens_predicted``),
``token_ids`` (the ids an event carried), ``tokenizer`` (the target's tokenizer over the
text delta), ``chunks`` (one per event with text).

The hot path: most events of a long stream are "one more token, not finished". When
the stream carries a cumulative counter, :meth:`EventStream._ordinary` reads it with a
few byte searches instead of decoding the whole JSON event; any event that is not
plainly such an intermediate event (a finish, usage details, an error, anything
unexpected) is decoded in full, so nothing is lost. Collecting ids, text or logprobs
needs the full decode, so it turns the shortcut off.

The full decode and the request bodies are orjson's (``runtime.json_codec``, with json's
answer wherever orjson would refuse what json takes, so what counts as malformed is
unchanged); a stream whose every event is decoded (a server without a cumulative counter,
or ``--record-outputs``) measured ~3 µs less CPU per token with it (38.8 → 35.6 µs at 256
streams, benchmarks/loadgen_overhead.py's engine). A prompt's ids stay the numpy array
the plan draws them as, which the encoder writes directly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from loadgen.sse import NamedEvent, SSEParser
from loadgen.target import Target
from runtime.json_codec import loads
from workloads.plan import RequestSpec

if TYPE_CHECKING:
    import numpy as np

#: A prompt's token ids: a numpy array from the plan, or a plain sequence.
TokenIds: TypeAlias = "np.ndarray | Sequence[int]"

#: A counter's value in an event: digits up to the ``,`` or ``}`` that ends it (anything
#: else, such as ``12.0`` or `` 12``, is left to the full decode).
_COUNTER = re.compile(rb"(\d+)[,}]")

#: Longest error message kept on a record; server messages can embed a whole prompt.
MAX_MESSAGE = 300


@dataclass(frozen=True)
class RequestParams:
    """Sampling and reporting choices applied to every request of a run."""

    ignore_eos: bool = True
    temperature: float | None = 0.0
    logprobs: bool = False

    def sampling(self, ignore_eos_accepted: bool = True) -> dict[str, Any]:
        """The sampling fields every API names alike (where the server accepts them)."""
        fields: dict[str, Any] = {}
        if self.temperature is not None:
            fields["temperature"] = self.temperature
        if self.ignore_eos and ignore_eos_accepted:
            fields["ignore_eos"] = True
        return fields


@dataclass(frozen=True)
class Outgoing:
    """What one request sends, before an API gives it its shape."""

    spec: RequestSpec
    prompt: TokenIds | str
    cache_salt: str | None = None
    want_ids: bool = False


def short(text: str) -> str:
    """One line, at most ``MAX_MESSAGE`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"


def error_message(obj: Any) -> str:
    """The message of an error body or event, whatever its shape."""
    if isinstance(obj, dict):
        inner = obj.get("error", obj)
        if isinstance(inner, dict):
            for key in ("message", "detail", "msg"):
                if inner.get(key):
                    return short(inner[key])
        elif inner:
            return short(inner)
        if obj.get("detail"):
            return short(obj["detail"])
    return short(json.dumps(obj) if not isinstance(obj, str) else obj)


class EventStream:
    """Reads one response stream; subclasses decode one API's events."""

    __slots__ = (
        "_count_text",
        "_counter",
        "_fast",
        "cached_tokens",
        "completion_tokens",
        "done",
        "error",
        "finish_reason",
        "logprobs",
        "malformed",
        "method",
        "prompt_tokens",
        "sse",
        "text",
        "token_ids",
        "tokens",
    )

    def __init__(
        self,
        *,
        want_ids: bool = False,
        want_text: bool = False,
        want_logprobs: bool = False,
        count_tokens: Callable[[str], int] | None = None,
        fast: bool = True,
    ) -> None:
        self.sse = SSEParser()
        self.done = False
        self.tokens = 0
        self.method: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.malformed: str | None = None
        self.token_ids: list[int] | None = [] if want_ids else None
        self.text: list[str] | None = [] if want_text else None
        self.logprobs: list[float] | None = [] if want_logprobs else None
        self._count_text = count_tokens
        self._counter = 0  # the last cumulative token count the server reported
        # Only the exact full decode can collect ids, text and logprobs.
        self._fast = fast and not (want_ids or want_text or want_logprobs)

    def feed(self, data: bytes) -> int:
        """Consume one network read; return the number of output tokens it carried.

        The common read, exactly one ordinary event and nothing held back, is counted
        straight from the bytes, without the SSE parser's list or a JSON decode. Its test
        is slices and ``find`` on purpose: on CPython 3.11 ``x in data`` with a bytes
        ``x`` first tries ``x`` as an integer and builds (then drops) a ``TypeError``,
        and ``startswith`` parses its arguments from a tuple (callgrind, one ordinary
        vLLM event: 17.5k instructions per read with them, 15.2k without; the counter
        read by one regular expression match rather than two ``find``, a slice and
        ``int``: 14.2k).
        """
        end = len(data) - 2  # where a lone event's blank line starts
        if (
            self._fast
            and self.sse.idle
            and data[:7] == b"data: {"
            and data[end - 1 :] == b"}\n\n"
            and data.find(b"\n") == end
            and data.find(b"\r") < 0
            and end <= self.sse.max_event_bytes
        ):
            n = self._ordinary(data)
            if n is not None:
                self.tokens += n
                return n
        n = 0
        for payload in self.sse.feed(data):
            n += self.on_event(payload)
        self.tokens += n
        return n

    def close(self) -> int:
        """The connection ended: flush what the parser held back; tokens it carried."""
        n = 0
        for payload in self.sse.close():
            n += self.on_event(payload)
        self.tokens += n
        return n

    #: Bytes found only in events that are not a stream's last (e.g. ``"finish_reason":null``)
    #: and the key of the cumulative token counter those events carry: together they
    #: let :meth:`on_event` skip the JSON decode of an ordinary event.
    intermediate: bytes = b""
    counter_key: bytes = b""

    def on_event(self, payload: bytes) -> int:
        """One event's payload; returns the tokens it carried."""
        if self._fast and payload[:1] == b"{" and payload[-1:] == b"}":
            n = self._ordinary(payload)
            if n is not None:
                return n
        if payload == b"[DONE]":
            self.done = True
            return 0
        obj = self.decode(payload)
        if obj is None:
            return 0
        try:
            return self.on_object(obj)
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            self._note_malformed(payload, f"unexpected shape: {exc}")
            return 0

    def on_object(self, obj: dict[str, Any]) -> int:
        """A decoded event that is not an error; returns the tokens it carried."""
        raise NotImplementedError

    def _ordinary(self, event: bytes) -> int | None:
        """Tokens of an ordinary intermediate event, read off its cumulative counter.

        ``None`` unless the event is plainly one (its ``intermediate`` marker present,
        the counter an integer): the caller then decodes it in full. A quoted key
        followed by a colon cannot occur inside a JSON string (its quotes would be
        escaped), so the match is the key itself; the last one counts.
        """
        if event.find(self.intermediate) < 0:
            return None
        at = event.rfind(self.counter_key)
        value = _COUNTER.match(event, at + len(self.counter_key)) if at >= 0 else None
        return None if value is None else self.from_counter(int(value[1]))

    # -- helpers for subclasses ---------------------------------------------------------
    def decode(self, payload: bytes) -> dict[str, Any] | None:
        """The event as a JSON object, or ``None`` after noting why it is not one."""
        if isinstance(payload, NamedEvent) and payload.name == "error":
            self.error = short(payload.decode("utf-8", "replace"))
            return None
        try:
            obj = loads(payload)
        except ValueError as exc:
            self._note_malformed(payload, str(exc))
            return None
        if not isinstance(obj, dict):
            self._note_malformed(payload, f"a JSON {type(obj).__name__}, not an object")
            return None
        if "error" in obj or obj.get("object") == "error":
            self.error = error_message(obj)
            return None
        return obj

    def _note_malformed(self, payload: bytes, why: str) -> None:
        if self.malformed is None:
            head = payload[:60].decode("utf-8", "replace")
            self.malformed = short(f"event is not a JSON object ({why}): {head!r}")

    def from_counter(self, cumulative: int) -> int:
        """Tokens since the last cumulative count the server reported."""
        n = cumulative - self._counter
        self._counter = cumulative
        if self.method is None and n:
            self.method = "usage"
        return n

    def from_ids(self, ids: list[int]) -> int:
        if self.method is None and ids:
            self.method = "token_ids"
        return len(ids)

    def from_text(self, text: str | None) -> int:
        """Tokens of a text delta: the target's tokenizer when known, else one per event."""
        if not text:
            return 0
        if self._count_text is not None:
            if self.method is None:
                self.method = "tokenizer"
            return max(1, self._count_text(text))
        if self.method is None:
            self.method = "chunks"
        return 1

    def keep_ids(self, ids: Any) -> None:
        if self.token_ids is not None and isinstance(ids, list):
            self.token_ids.extend(ids)

    def keep_text(self, text: Any) -> None:
        if self.text is not None and isinstance(text, str):
            self.text.append(text)

    def set_usage(self, prompt: Any, completion: Any, cached: Any) -> None:
        """Record server-reported counts; an absent value never overwrites a known one."""
        if isinstance(prompt, int):
            self.prompt_tokens = prompt
        if isinstance(completion, int):
            self.completion_tokens = completion
        if isinstance(cached, int):
            self.cached_tokens = cached


class Adapter:
    """One API: the request it sends and the reader of its stream."""

    path: str = ""
    #: Whether the API takes token ids as the prompt (else it needs text).
    takes_token_ids: bool = True

    def __init__(self, target: Target, params: RequestParams) -> None:
        self.target = target
        self.params = params
        self.caps = target.capabilities

    def body(self, out: Outgoing) -> dict[str, Any]:
        """The JSON body of ``out`` in this API's shape."""
        raise NotImplementedError

    def new_stream(self, want_ids: bool, want_text: bool = False) -> EventStream:
        """A reader for one response; ``want_*``: collect the returned ids / text."""
        raise NotImplementedError

    def check(self, spec: RequestSpec) -> str | None:
        """Why this API cannot send ``spec`` (checked for the whole plan before a run)."""
        if spec.text is None and spec.messages is None and not self.takes_token_ids:
            return f"the {self.target.api} API takes text prompts; the plan holds token ids"
        return None

    def stream_kwargs(self, want_ids: bool, want_text: bool) -> dict[str, Any]:
        return {
            "want_ids": want_ids,
            "want_text": want_text,
            "want_logprobs": self.params.logprobs,
            "count_tokens": self.target.count_tokens,
        }
