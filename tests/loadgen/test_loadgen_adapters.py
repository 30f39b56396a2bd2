"""Each API adapter over a real socket: the real captured streams, request bodies, token counts."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web
from loadgen_servers import Handler, Server, generator, replay, run_against, specs
from repo_paths import FIXTURES

# capture, flavour, api -> tokens counted, method, output, prompt, cached, chunks
CAPTURES = [
    (
        "vllm-cpu/completions-stream-include-usage.sse",
        "vllm",
        "completions",
        16,
        "chunks",
        16,
        21,
        0,
    ),
    ("vllm-cpu/chat-stream-continuous-usage.sse", "vllm", "chat", 12, "usage", 12, 29, 0),
    ("vllm-cpu/chat-stream-include-usage.sse", "vllm", "chat", 3, "chunks", 8, 19, 0),
    ("llamacpp/completion-native-stream.sse", "llamacpp", "llamacpp", 8, "usage", 8, 4, 3),
    ("llamacpp/v1-completions-stream.sse", "llamacpp", "completions", 16, "chunks", 16, 7, 0),
    ("llamacpp/v1-chat-completions-stream.sse", "llamacpp", "chat", 8, "chunks", 8, 15, 14),
    ("llamacpp/prefix-reuse-1.sse", "llamacpp", "completions", 4, "chunks", 4, 1505, 1501),
]


def _text_spec(spec):  # chat APIs take text
    return replace(spec, text="hello there")


@pytest.mark.parametrize("pieces", [None, 37], ids=["whole", "37-byte-pieces"])
@pytest.mark.parametrize(
    ("name", "flavour", "api", "tokens", "method", "output", "prompt", "cached"), CAPTURES
)
def test_real_captures_through_their_adapter(
    tmp_path: Path, name, flavour, api, tokens, method, output, prompt, cached, pieces
) -> None:
    raw = (FIXTURES / name).read_bytes()
    sizes = [pieces] * (len(raw) // pieces + 1) if pieces else None
    spec = specs(1)[0]
    if api == "chat":
        spec = _text_spec(spec)

    async def go():
        async with Server(replay(raw, sizes, gap_s=0.002 if pieces else 0.0)) as url:
            return await run_against(url, [spec], tmp_path, flavour=flavour, api=api)

    result, requests, chunks, _ = asyncio.run(go())
    row = requests.iloc[0]
    assert result.status == "complete" and row["status"] == "ok", row["error_message"]
    assert int(chunks["n_tokens"].sum()) == tokens
    assert row["token_count_method"] == method
    assert row["output_tokens"] == output
    assert row["prompt_tokens"] == prompt
    assert row["cached_tokens"] == cached
    assert row["finish_reason"] == "length"
    assert row["http_status"] == 200
    assert row["num_chunks"] == len(chunks)
    assert row["first_token_s"] == chunks["t_s"].min()
    assert row["sent_s"] < row["first_token_s"] <= row["end_s"]


def test_http_chunk_framing_captured_raw(tmp_path: Path) -> None:
    """The ``curl --raw`` capture keeps HTTP/1.1 chunk framing: serve it byte for byte."""
    head = (FIXTURES / "vllm-cpu" / "completions-stream.headers").read_bytes()
    raw = (FIXTURES / "vllm-cpu" / "completions-stream-chunked-raw.bin").read_bytes()
    head = head.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n").rstrip(b"\r\n") + b"\r\n\r\n"

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        for i in range(0, len(raw), 50):  # 50-byte writes cut chunk headers and events
            writer.write((head if i == 0 else b"") + raw[i : i + 50])
            await writer.drain()
            await asyncio.sleep(0.001)
        writer.close()

    async def go():
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await run_against(f"http://127.0.0.1:{port}", specs(1), tmp_path)

    _, requests, chunks, _ = asyncio.run(go())
    assert requests.iloc[0]["status"] == "ok", requests.iloc[0]["error_message"]
    assert requests.iloc[0]["output_tokens"] == 4 and int(chunks["n_tokens"].sum()) == 4


def recorder(answer: bytes, seen: list) -> Handler:
    """Keeps each request's path, headers and JSON body in ``seen``, then replays ``answer``."""

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append((request.path, dict(request.headers), await request.json()))
        return await replay(answer)(request)

    return handler


@pytest.mark.parametrize(
    ("flavour", "api", "path", "expected", "absent"),
    [
        (
            "vllm",
            "completions",
            "/v1/completions",
            {
                "cache_salt": "tenant-a",
                "ignore_eos": True,
                "return_token_ids": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                "max_tokens": 16,
                "model": "tiny-llama",
                "stream": True,
                "temperature": 0.0,
            },
            (),
        ),
        (
            "openai",
            "completions",
            "/v1/completions",
            {"stream_options": {"include_usage": True}, "max_tokens": 16},
            ("cache_salt", "ignore_eos", "return_token_ids"),
        ),
        (
            "sglang",
            "sglang",
            "/generate",
            {
                "extra_key": "tenant-a",
                "stream": True,
                "sampling_params": {"max_new_tokens": 16, "temperature": 0.0, "ignore_eos": True},
            },
            ("model",),
        ),
        (
            "llamacpp",
            "llamacpp",
            "/completion",
            {"n_predict": 16, "cache_prompt": True, "stream": True, "return_tokens": True},
            ("model", "cache_salt"),
        ),
    ],
)
def test_request_bodies_and_the_api_key(
    tmp_path: Path, flavour, api, path, expected, absent
) -> None:
    raw = (FIXTURES / "vllm-cpu" / "completions-stream-include-usage.sse").read_bytes()
    seen: list = []
    spec = replace(specs(1)[0], tenant="tenant-a")

    async def go():
        async with Server(recorder(raw, seen)) as url:
            return await run_against(
                url,
                [spec],
                tmp_path,
                flavour=flavour,
                api=api,
                keep_token_ids=True,
                api_key="sk-secret-123",
            )

    _, _, _, run_dir = asyncio.run(go())
    seen_path, headers, body = seen[0]
    assert seen_path == path
    assert headers["Authorization"] == "Bearer sk-secret-123"
    for key, value in expected.items():
        assert body[key] == value, key
    for key in absent:
        assert key not in body
    prompt = body.get("prompt", body.get("input_ids"))
    assert prompt == [300] * 8  # token ids, exactly as planned
    for file in run_dir.path.iterdir():  # the key is never written anywhere
        assert b"sk-secret-123" not in file.read_bytes()


def _sglang_event(text: str, ids: list[int], done: int, finish: object) -> bytes:
    meta = {
        "id": "x",
        "finish_reason": finish,
        "prompt_tokens": 8,
        "completion_tokens": done,
        "cached_tokens": 5,
    }
    obj = {"text": text, "output_ids": ids, "meta_info": meta}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _sglang_stream(incremental: bool, chunk: int = 2, total: int = 6) -> bytes:
    """SGLang's documented /generate stream: cumulative text and ids unless incremental."""
    out = b""
    for done in range(chunk, total + 1, chunk):
        new = list(range(done - chunk, done))
        ids = new if incremental else list(range(done))
        text = "".join(f"t{i}" for i in (new if incremental else ids))
        finish = {"type": "length", "length": total} if done == total else None
        out += _sglang_event(text, ids, done, finish)
    return out + b"data: [DONE]\n\n"


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
def test_sglang_generate_stream(tmp_path: Path, incremental: bool) -> None:
    raw = _sglang_stream(incremental)

    async def go():
        async with Server(replay(raw, [len(raw) // 4] * 4, gap_s=0.005)) as url:
            return await run_against(
                url, specs(1), tmp_path, flavour="sglang", api="sglang", keep_token_ids=True
            )

    _, requests, chunks, _ = asyncio.run(go())
    row = requests.iloc[0]
    assert row["status"] == "ok", row["error_message"]
    assert list(row["output_token_ids"]) == [0, 1, 2, 3, 4, 5]  # deltas, not repeats
    assert int(chunks["n_tokens"].sum()) == 6 and row["token_count_method"] == "usage"
    assert (row["prompt_tokens"], row["cached_tokens"], row["output_tokens"]) == (8, 5, 6)
    assert row["finish_reason"] == "length"


def test_sglang_abort_is_an_error_event(tmp_path: Path) -> None:
    raw = (
        _sglang_event("t0", [0], 1, None)
        + _sglang_event("t0", [0], 1, {"type": "abort", "message": "out of memory"})
        + b"data: [DONE]\n\n"
    )

    async def go():
        async with Server(replay(raw)) as url:
            return await run_against(url, specs(1), tmp_path, flavour="sglang", api="sglang")

    _, requests, _, _ = asyncio.run(go())
    row = requests.iloc[0]
    assert row["error_kind"] == "stream_error_event" and "out of memory" in row["error_message"]


def test_multi_token_chunks_are_counted(tmp_path: Path) -> None:
    async def go():
        async with Server(generator(0.01, 0.01, tokens_per_event=4)) as url:
            return await run_against(url, specs(3, max_tokens=18), tmp_path, concurrency=3)

    _, requests, chunks, _ = asyncio.run(go())
    assert (requests["status"] == "ok").all()
    assert (requests["output_tokens"] == 18).all()
    for _, row in requests.iterrows():
        mine = chunks[chunks["request_id"] == row["id"]]
        assert list(mine["n_tokens"]) == [4, 4, 4, 4, 2]
        assert row["num_chunks"] == 5 and row["multi_token_chunks"] == 5
        assert row["token_count_method"] == "usage"


def _ids_event(ids: list[int], text: str, finish: str | None) -> bytes:
    choice = {"index": 0, "text": text, "finish_reason": finish, "token_ids": ids}
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


def test_token_ids_and_tokenizer_counts(tmp_path: Path) -> None:
    """Without continuous usage: ids per event, else the target's tokenizer on the text."""
    events = [
        _ids_event([1, 2, 3], "one two three", None),
        _ids_event([4], "four", None),
        _ids_event([5, 6], "five six", "length") + b"data: [DONE]\n\n",
    ]
    raw, sizes = b"".join(events), [len(e) for e in events]

    async def go(flavour: str):
        async with Server(replay(raw, sizes, gap_s=0.01)) as url:
            return await run_against(url, specs(1), tmp_path / flavour, flavour=flavour)

    _, requests, chunks, _ = asyncio.run(go("openai"))
    assert requests.iloc[0]["token_count_method"] == "token_ids"
    assert list(chunks["n_tokens"]) == [3, 1, 2]

    raw = raw.replace(b'"token_ids"', b'"not_ids"')

    async def go_text():
        async with Server(replay(raw, sizes, gap_s=0.01)) as url:
            return await run_against(
                url,
                specs(1),
                tmp_path / "text",
                flavour="openai",
                count_tokens=lambda text: len(text.split()),
            )

    _, requests, chunks, _ = asyncio.run(go_text())
    assert requests.iloc[0]["token_count_method"] == "tokenizer"
    assert list(chunks["n_tokens"]) == [3, 1, 2]
