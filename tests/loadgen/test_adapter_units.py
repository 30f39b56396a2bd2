"""Each API adapter on its own: the request body its server expects, and its stream reader
fed the real captures in ``fixtures/`` (vLLM, llama.cpp) or SGLang's documented events."""

from __future__ import annotations

import json

import pytest
from repo_paths import FIXTURES

from loadgen.adapters import adapter_for
from loadgen.adapters.base import EventStream, Outgoing, RequestParams, error_message, short
from loadgen.adapters.llamacpp import LlamaCppAdapter
from loadgen.adapters.openai import OpenAIAdapter
from loadgen.adapters.sglang import SGLangAdapter
from loadgen.target import Target
from workloads.plan import Prompt, RequestSpec, Segment

SPEC = RequestSpec("r", Prompt((Segment(3, key=1),)), max_tokens=16)
LORA = RequestSpec("r", Prompt((Segment(3, key=1),)), max_tokens=16, lora="adapter-a")


def _target(flavour: str, api: str) -> Target:
    return Target("http://127.0.0.1:9", flavour, api, "model-m")


def _read(stream: EventStream, data: bytes, piece: int | None = None) -> int:
    """Feed ``data`` whole, or in reads of ``piece`` bytes; the tokens counted in all."""
    if piece is None:
        return stream.feed(data) + stream.close()
    total = sum(stream.feed(data[i : i + piece]) for i in range(0, len(data), piece))
    return total + stream.close()


# -- request bodies ---------------------------------------------------------------------
def test_vllm_completions_body_carries_its_extras():
    adapter = OpenAIAdapter(_target("vllm", "completions"), RequestParams(logprobs=True))
    body = adapter.body(Outgoing(SPEC, [5, 6, 7], cache_salt="tenant-1", want_ids=True))
    assert body == {
        "model": "model-m",
        "prompt": [5, 6, 7],
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "temperature": 0.0,
        "ignore_eos": True,
        "cache_salt": "tenant-1",
        "return_token_ids": True,
        "logprobs": 0,
    }
    assert adapter.path == "/v1/completions"


def test_a_plain_openai_server_gets_no_vllm_extras_and_chat_gets_one_user_message():
    adapter = OpenAIAdapter(_target("openai", "chat"), RequestParams(temperature=None))
    body = adapter.body(Outgoing(LORA, "hello", cache_salt="tenant-1", want_ids=True))
    assert body == {
        "model": "adapter-a",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert adapter.path == "/v1/chat/completions"
    assert "takes text prompts" in adapter.check(SPEC)


def test_sglang_generate_body_names_its_own_fields():
    adapter = SGLangAdapter(_target("sglang", "sglang"), RequestParams(logprobs=True))
    body = adapter.body(Outgoing(LORA, [5, 6], cache_salt="tenant-1"))
    assert body == {
        "input_ids": [5, 6],
        "sampling_params": {"max_new_tokens": 16, "temperature": 0.0, "ignore_eos": True},
        "stream": True,
        "extra_key": "tenant-1",
        "lora_path": "adapter-a",
        "return_logprob": True,
    }
    assert "text" in adapter.body(Outgoing(SPEC, "hi"))


def test_llamacpp_completion_body_and_what_it_cannot_send():
    adapter = LlamaCppAdapter(_target("llamacpp", "llamacpp"), RequestParams())
    body = adapter.body(Outgoing(SPEC, [5, 6], want_ids=True))
    assert body == {
        "prompt": [5, 6],
        "n_predict": 16,
        "stream": True,
        "cache_prompt": True,
        "temperature": 0.0,
        "ignore_eos": True,
        "return_tokens": True,
    }
    assert adapter.check(SPEC) is None
    assert "LoRA" in adapter.check(LORA)
    with_logprobs = LlamaCppAdapter(_target("llamacpp", "llamacpp"), RequestParams(logprobs=True))
    assert "logprobs" in with_logprobs.check(SPEC)


def test_the_adapter_is_picked_by_the_targets_api():
    assert isinstance(adapter_for(_target("vllm", "chat")), OpenAIAdapter)
    assert isinstance(adapter_for(_target("sglang", "sglang")), SGLangAdapter)
    assert isinstance(adapter_for(_target("llamacpp", "llamacpp")), LlamaCppAdapter)


# -- stream readers on real captures ------------------------------------------------------
@pytest.mark.parametrize("piece", [None, 1, 7, 100])
def test_vllm_chat_with_continuous_usage_counts_from_the_counter(piece):
    data = (FIXTURES / "vllm-cpu" / "chat-stream-continuous-usage.sse").read_bytes()
    stream = adapter_for(_target("vllm", "chat")).new_stream(want_ids=False)
    assert _read(stream, data, piece) == 12
    assert (stream.method, stream.prompt_tokens, stream.completion_tokens) == ("usage", 29, 12)
    assert (stream.cached_tokens, stream.finish_reason, stream.done) == (0, "length", True)


def test_vllm_completions_without_continuous_usage_count_one_per_event_and_keep_text():
    data = (FIXTURES / "vllm-cpu" / "completions-stream-include-usage.sse").read_bytes()
    stream = adapter_for(_target("vllm", "completions")).new_stream(False, want_text=True)
    assert _read(stream, data, 50) == 16
    assert (stream.method, stream.completion_tokens, stream.cached_tokens) == ("chunks", 16, 0)
    assert stream.text[:3] == [" mon", "lso", "raps"] and stream.malformed is None


def test_llamacpp_openai_stream_reports_cached_tokens_of_a_reused_prefix():
    data = (FIXTURES / "llamacpp" / "prefix-reuse-1.sse").read_bytes()
    stream = adapter_for(_target("llamacpp", "completions")).new_stream(want_ids=False)
    assert _read(stream, data) == 4
    assert (stream.prompt_tokens, stream.cached_tokens, stream.finish_reason) == (
        1505, 1501, "length",
    )  # fmt: skip


def test_llamacpp_native_stream_ends_on_stop_with_its_timings():
    data = (FIXTURES / "llamacpp" / "completion-native-stream.sse").read_bytes()
    stream = adapter_for(_target("llamacpp", "llamacpp")).new_stream(want_ids=True)
    assert _read(stream, data, 13) == 8
    assert stream.token_ids == [1400, 5053, 6231, 3640, 4362, 4502, 1725, 4793]
    assert (stream.prompt_tokens, stream.cached_tokens, stream.finish_reason) == (4, 3, "length")
    assert stream.done and stream.method == "usage"


# -- SGLang's events as its docstring and SGLang's docs give them -------------------------
def _sglang_events(incremental: bool) -> bytes:
    ids, events = [11, 12, 13], []
    for n in (1, 2, 3):
        out = ids[n - 1 : n] if incremental else ids[:n]
        meta = {"prompt_tokens": 5, "completion_tokens": n, "cached_tokens": 4,
                "finish_reason": {"type": "length", "length": 3} if n == 3 else None}  # fmt: skip
        events.append({"text": "x" * len(out), "output_ids": out, "meta_info": meta})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + (
        b"data: [DONE]\n\n"
    )


@pytest.mark.parametrize("incremental", [False, True])
def test_sglang_cumulative_and_incremental_outputs_give_the_same_ids(incremental):
    stream = adapter_for(_target("sglang", "sglang")).new_stream(want_ids=True, want_text=True)
    assert _read(stream, _sglang_events(incremental)) == 3
    assert stream.token_ids == [11, 12, 13] and "".join(stream.text) == "xxx"
    assert (stream.prompt_tokens, stream.cached_tokens, stream.finish_reason) == (5, 4, "length")


def test_sglang_abort_is_an_error_with_its_message():
    event = {"text": "", "output_ids": [], "meta_info": {"completion_tokens": 0,
             "finish_reason": {"type": "abort", "message": "out of memory"}}}  # fmt: skip
    stream = adapter_for(_target("sglang", "sglang")).new_stream(want_ids=False)
    _read(stream, b"data: " + json.dumps(event).encode() + b"\n\n")
    assert (stream.finish_reason, stream.error) == ("abort", "out of memory")


# -- the byte-level shortcut for ordinary events ----------------------------------------------
_ORDINARY = (
    b'data: {"choices":[{"text":"a","finish_reason":null}],"usage":{"completion_tokens":%d}}'
)
_SHORTCUT_READS = [
    _ORDINARY % 1 + b"\n\n",
    _ORDINARY % 2 + b"\n\n",
    # spaced JSON: no marker as written, decoded in full
    b'data: {"choices": [{"text": "a", "finish_reason": null}], '
    b'"usage": {"completion_tokens": 3}}\n\n',
    # the counter key twice: the last is the event's own usage
    b'data: {"x":{"completion_tokens":99},"choices":[{"text":"a","finish_reason":null}],'
    b'"usage":{"completion_tokens":4}}\n\n',
    _ORDINARY % 5 + b"\n\n" + _ORDINARY % 6 + b"\n\n",  # two events in one read
    b": ping\n\n" + _ORDINARY % 7 + b"\n\n",
    _ORDINARY % 8 + b"\n",  # its blank line comes in the next read
    b"\n",
    b'data: {"choices":[{"text":"a","finish_reason":null}],"usage":{"completion_tokens":9.0}}\n\n',
    _ORDINARY % 10 + b"\r\n\r\n",  # CRLF line ends
    _ORDINARY % 11 + b"\n\n",
    # a lone CR ends a line: what precedes it is the event, and it is not JSON
    b'data: {"choices":[{"text":"a","finish_reason":null}],\r"usage":{"completion_tokens":12}}\n\n',
    b'data: {"choices":[{"text":"a","finish_reason":"length"}],'
    b'"usage":{"completion_tokens":13}}\n\ndata: [DONE]\n\n',
]


def test_the_shortcut_reads_every_event_as_the_full_decode_does():
    """The counter read off the bytes (``EventStream._ordinary``) against the full JSON
    decode (collecting text turns the shortcut off), read by read, on reads made to trip
    it: spacing, a repeated key, several events or a split event in a read, a counter
    that is not an integer, CRLF and a lone CR."""
    adapter = adapter_for(_target("vllm", "completions"))
    quick, decoded = adapter.new_stream(False), adapter.new_stream(False, want_text=True)
    quick_counts = [quick.feed(read) for read in _SHORTCUT_READS] + [quick.close()]
    decoded_counts = [decoded.feed(read) for read in _SHORTCUT_READS] + [decoded.close()]
    assert quick_counts == decoded_counts
    assert quick_counts[:8] == [1, 1, 1, 1, 2, 1, 0, 1]
    facts = ("tokens", "method", "completion_tokens", "finish_reason", "done", "malformed")
    assert [getattr(quick, f) for f in facts] == [getattr(decoded, f) for f in facts]
    assert quick.done and quick.malformed.startswith("event is not a JSON object")


# -- shared helpers --------------------------------------------------------------------------
def test_error_events_and_bad_payloads_are_noted_not_raised():
    stream = adapter_for(_target("vllm", "completions")).new_stream(want_ids=False)
    stream.feed(b'data: {"error": {"message": "boom\\n  twice"}}\n\ndata: [1, 2]\n\n')
    assert stream.error == "boom twice"
    assert stream.malformed.startswith("event is not a JSON object (a JSON list")
    assert error_message({"detail": "not found"}) == "not found"
    assert len(short("x" * 1000)) == 300 and short("x" * 1000).endswith("…")
