"""Shaping engine output into OpenAI/vLLM response bodies and SSE events.

The streaming path runs once per token per running request (512 streams at a 20 ms step
are 25,600 events a second on one core), so it never calls ``json.dumps`` on a whole
chunk. Each request pre-builds the constant head and tail of its chunks as strings once;
a chunk is then the head, the JSON-escaped text (C-accelerated string escaping) and the
tail, joined and encoded in one go. The optional parts (logprobs, token ids, continuous
usage) are spliced in only when the request asked for them.

Field order and ``null`` fields follow the real vLLM captures in
``tests/fixtures/vllm-cpu`` (``completions-stream-include-usage.sse``,
``chat-stream-continuous-usage.sse``, ``completions-nonstream.json``), so parsers
written against vLLM read these bytes unchanged. One difference is deliberate: usage
always carries ``prompt_tokens_details.cached_tokens`` (vLLM needs
``--enable-prompt-tokens-details`` for it), because measuring the prefix cache is what
this engine is for.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any

from simengine.openai_api import ApiError, GenerationRequest
from simengine.tokenizer import Tokenizer

if TYPE_CHECKING:
    from simengine.core import TokenOut

DONE = b"data: [DONE]\n\n"
_LOGPROB_FLOOR = -9999.0


def compact_json(value: object) -> str:
    """JSON without spaces or ASCII escaping, the way vLLM's responses are written."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sse_error(error: ApiError) -> bytes:
    """A failure after the stream started: vLLM sends the error body as an event, then [DONE]."""
    return f"data: {compact_json(error.body())}\n\n".encode() + DONE


def _usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


class ResponseShaper:
    """Turns one request's engine output into SSE events or a whole response body.

    Stateful for streams: it counts completion tokens (for continuous usage), the text
    offset (for completion logprobs) and whether the first event, which carries the chat
    role and the prompt token ids, has gone out.
    """

    def __init__(
        self,
        req: GenerationRequest,
        *,
        created: int,
        model: str,
        tokenizer: Tokenizer,
        fingerprint: str,
    ) -> None:
        self.req = req
        self.tokenizer = tokenizer
        self.fingerprint = fingerprint
        self.request_id = request_id = req.engine.request_id
        self.created = created
        self.model = model
        self.object = "chat.completion.chunk" if req.chat else "text_completion"
        self.completion_tokens = 0
        self._text_offset = 0
        self._started = False
        self._head = (
            f'data: {{"id":{compact_json(request_id)},"object":"{self.object}","created":{created},'
            f'"model":{compact_json(model)},"choices":[{{"index":0,'
            + ('"delta":{"content":' if req.chat else '"text":')
        )
        self._close_text = "}" if req.chat else ""
        self._plain_tail = (
            '},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
            if req.chat
            else ',"logprobs":null,"finish_reason":null,"stop_reason":null,'
            '"prompt_token_ids":null,"token_ids":null}]}\n\n'
        )
        self._plain = (
            req.engine.logprobs is None and not req.return_token_ids and not req.continuous_usage
        )

    # -- streaming -----------------------------------------------------------------------
    def chunk(self, tokens: Sequence[TokenOut], finish_reason: str | None) -> bytes:
        """The SSE event(s) for tokens produced since the last event (may end the choice).

        The first call also emits, for chat, vLLM's role event
        (``delta: {"role": "assistant", "content": ""}``) just before the first tokens,
        the moment vLLM sends it.
        """
        ids = [t.token_id for t in tokens]
        self.completion_tokens += len(ids)
        text = self.tokenizer.decode(ids)
        if self._plain and finish_reason is None and self._started:
            return (self._head + encode_basestring(text) + self._plain_tail).encode()
        lead = ""
        if not self._started:
            self._started = True
            lead = self._role_event() if self.req.chat else ""
        return (lead + self._full_chunk(text, ids, tokens, finish_reason)).encode()

    def _role_event(self) -> str:
        event: dict[str, Any] = self._envelope(
            [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ]
        )
        if self.req.continuous_usage:
            event["usage"] = self._stream_usage(0)
        event["prompt_token_ids"] = self._prompt_ids()
        event["prompt_text"] = None
        return f"data: {compact_json(event)}\n\n"

    def _prompt_ids(self) -> list[int] | None:
        return self.req.engine.prompt_token_ids if self.req.return_token_ids else None

    def _full_chunk(
        self,
        text: str,
        ids: list[int],
        tokens: Sequence[TokenOut],
        finish_reason: str | None,
    ) -> str:
        req = self.req
        logprobs = self._logprobs(tokens, text) if req.engine.logprobs is not None else None
        parts = [self._head, encode_basestring(text), self._close_text]
        parts.append(
            f',"logprobs":{compact_json(logprobs)},"finish_reason":{compact_json(finish_reason)}'
        )
        if finish_reason is not None or not req.chat:
            parts.append(',"stop_reason":null')
        if not req.chat:
            first = self.completion_tokens == len(ids)
            prompt_ids = self._prompt_ids() if first else None
            parts.append(f',"prompt_token_ids":{compact_json(prompt_ids)}')
        parts.append(f',"token_ids":{compact_json(ids if req.return_token_ids else None)}}}]')
        if req.continuous_usage:
            parts.append(f',"usage":{compact_json(self._stream_usage(self.completion_tokens))}')
        if finish_reason is not None and not req.include_usage:
            parts.append(f',"system_fingerprint":{compact_json(self.fingerprint)}')
        parts.append("}\n\n")
        return "".join(parts)

    def _stream_usage(self, completion: int) -> dict[str, Any]:
        usage = _usage(len(self.req.engine.prompt_token_ids), completion)
        if self.req.chat:
            usage["completion_tokens_details"] = None
        return usage

    def final(self, cached_tokens: int) -> bytes:
        """The closing events: the usage event (``choices: []``) if asked for, then [DONE]."""
        if not self.req.include_usage:
            return DONE
        event = self._envelope([])
        event["usage"] = _usage(
            len(self.req.engine.prompt_token_ids), self.completion_tokens, cached_tokens
        )
        event["system_fingerprint"] = self.fingerprint
        return f"data: {compact_json(event)}\n\n".encode() + DONE

    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.request_id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    # -- logprobs ------------------------------------------------------------------------
    def _logprobs(self, tokens: Sequence[TokenOut], text: str) -> dict[str, Any]:
        if self.req.chat:
            return {"content": [self._chat_logprob(t) for t in tokens]}
        token_text = self.tokenizer.token_text
        offsets, values, names, tops = [], [], [], []
        offset = self._text_offset
        for t in tokens:
            name = token_text(t.token_id)
            offsets.append(offset)
            offset += len(name)
            values.append(max(t.logprob, _LOGPROB_FLOOR))
            names.append(name)
            top = {name: max(t.logprob, _LOGPROB_FLOOR)}
            for tid, lp in t.top_logprobs or ():
                top.setdefault(token_text(tid), max(lp, _LOGPROB_FLOOR))
            tops.append(top)
        self._text_offset += len(text)
        return {
            "text_offset": offsets,
            "token_logprobs": values,
            "tokens": names,
            "top_logprobs": tops,
        }

    def _chat_logprob(self, t: TokenOut) -> dict[str, Any]:
        entry = self._chat_entry(t.token_id, t.logprob)
        entry["top_logprobs"] = [self._chat_entry(tid, lp) for tid, lp in t.top_logprobs or ()]
        return entry

    def _chat_entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        name = self.tokenizer.token_text(token_id)
        return {
            "token": name,
            "logprob": max(logprob, _LOGPROB_FLOOR),
            "bytes": list(name.encode("utf-8", "replace")),
        }

    # -- whole responses -----------------------------------------------------------------
    def full_body(
        self, tokens: Sequence[TokenOut], finish_reason: str, cached_tokens: int
    ) -> dict[str, Any]:
        """The non-streaming response body for the whole output."""
        req = self.req
        ids = [t.token_id for t in tokens]
        text = self.tokenizer.decode(ids)
        self.completion_tokens = len(ids)
        logprobs = self._logprobs(tokens, text) if req.engine.logprobs is not None else None
        usage = _usage(len(req.engine.prompt_token_ids), len(ids), cached_tokens)
        usage["completion_tokens_details"] = None
        token_ids = ids if req.return_token_ids else None
        prompt_ids = self._prompt_ids()
        if req.chat:
            message = {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "reasoning": None,
            }
            choice = {"index": 0, "message": message, "logprobs": logprobs}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs}
        choice |= {"finish_reason": finish_reason, "stop_reason": None, "token_ids": token_ids}
        if not req.chat:
            choice |= {"prompt_logprobs": None, "prompt_token_ids": prompt_ids}
        choice["routed_experts"] = None
        body = {
            "id": self.request_id,
            "object": "chat.completion" if req.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": self.fingerprint,
            "usage": usage,
        }
        if req.chat:
            body |= {"prompt_logprobs": None, "prompt_token_ids": prompt_ids, "prompt_text": None}
        body |= {"kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}
        return body
