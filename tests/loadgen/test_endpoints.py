"""``--endpoint`` as users write it, and what detection reads about the served model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web
from loadgen_servers import Server, routes, status_reply
from repo_paths import FIXTURES

from loadgen.target import server_root
from perfmodel.config import EngineConfig
from probes.detect import detect_target
from simengine.embedded import EmbeddedServer
from workloads.errors import InputError


@pytest.mark.parametrize(
    ("typed", "root"),
    [
        ("http://host:8000/v1", "http://host:8000"),
        ("http://host:8000/v1/", "http://host:8000"),
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
        ("https://api.example.com/v1/chat/completions", "https://api.example.com"),
        ("http://host:8000/v1/completions", "http://host:8000"),
        ("http://gateway/llm/v1", "http://gateway/llm"),
        ("localhost", "http://localhost"),
        ("http://host:8000", "http://host:8000"),
    ],
)
def test_a_base_url_is_taken_with_or_without_v1_and_scheme(typed: str, root: str) -> None:
    assert server_root(typed) == root


@pytest.mark.parametrize("typed", ["ftp://host/v1", "http://", "host:port", ""])
def test_what_is_no_http_url_is_one_line_naming_the_flag(typed: str) -> None:
    with pytest.raises(InputError) as info:
        server_root(typed)
    assert info.value.field == "--endpoint" and "\n" not in str(info.value)


@pytest.mark.parametrize("suffix", ["/v1", "/v1/", ""])
def test_detection_works_from_any_form_and_says_the_paths(suffix: str) -> None:
    with EmbeddedServer(EngineConfig(fixed_step_s=0.001, vocab_size=4096)) as server:
        typed = server.url.removeprefix("http://") + suffix
        target = asyncio.run(detect_target(typed))
        assert target.base_url == server.url
        described = target.describe()
        assert described.paths["requests"] == "/v1/completions"
        assert described.paths["models"] == "/v1/models"
        assert described.paths["metrics"] == "/metrics"
        assert target.max_model_len == server.config.max_model_len
        assert target.discovered["max_model_len"] == "/v1/models max_model_len"


def _json(obj: object):
    return status_reply(200, json.dumps(obj).encode())


_not_found = status_reply(404, b'{"detail": "Not Found"}')


@pytest.mark.parametrize("unknown", ["refused", "empty"])
def test_vocabulary_found_by_bisecting_detokenize(unknown: str) -> None:
    """A vLLM-like server that lists no vocabulary: ``/detokenize`` refuses an unknown id
    (the embedded engine) or decodes it to "" (vLLM 0.32); ``/v1/completions`` refuses it."""
    vocab = 50_257
    seen: list[int] = []

    async def detokenize(request: web.Request) -> web.StreamResponse:
        (token,) = (await request.json())["tokens"]
        seen.append(token)
        if token < vocab:
            return web.json_response({"prompt": " word"})
        if unknown == "empty":
            return web.json_response({"prompt": ""})
        return web.json_response({"error": {"message": "out of vocabulary"}}, status=400)

    async def completions(request: web.Request) -> web.StreamResponse:
        (token,) = (await request.json())["prompt"]
        if token >= vocab:
            message = f"Token id {token} is out of vocabulary"
            return web.json_response({"error": {"message": message}}, status=400)
        return web.json_response({"choices": [{"text": "x"}]})

    models = {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 2048}]}

    async def go():
        paths = {
            "/v1/models": _json(models),
            "/detokenize": detokenize,
            "/v1/completions": completions,
        }
        async with Server(routes(paths, _not_found)) as url:
            return await detect_target(url + "/v1")

    target = asyncio.run(go())
    assert target.vocab_size == vocab and target.max_model_len == 2048
    assert target.discovered["vocab_size"] == "/detokenize, confirmed by /v1/completions"
    assert len(seen) < 40


def test_a_vocabulary_the_completions_api_does_not_confirm_stays_unknown() -> None:
    async def detokenize(request: web.Request) -> web.StreamResponse:
        (token,) = (await request.json())["tokens"]
        return web.json_response({"prompt": " w" if token < 3000 else ""})

    models = {"data": [{"id": "m", "owned_by": "vllm"}]}

    async def go():
        paths = {"/v1/models": _json(models), "/detokenize": detokenize}
        paths["/v1/completions"] = _json({"choices": [{"text": "x"}]})  # takes every id
        async with Server(routes(paths, _not_found)) as url:
            return await detect_target(url)

    assert asyncio.run(go()).vocab_size is None


def test_a_server_without_detokenize_leaves_the_vocabulary_unknown() -> None:
    models = {"data": [{"id": "m", "owned_by": "vllm"}]}

    async def go():
        async with Server(routes({"/v1/models": _json(models)}, _not_found)) as url:
            return await detect_target(url)

    target = asyncio.run(go())
    assert target.vocab_size is None and target.max_model_len is None


def test_llamacpp_context_from_props() -> None:
    models = (FIXTURES / "llamacpp" / "v1-models.json").read_bytes()
    props = (FIXTURES / "llamacpp" / "props.json").read_bytes()

    def raw(body: bytes):
        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(body=body, content_type="application/json")

        return handler

    async def go():
        paths = {"/v1/models": raw(models), "/props": raw(props)}
        async with Server(routes(paths, _not_found)) as url:
            return await detect_target(url)

    target = asyncio.run(go())
    assert (target.flavour, target.max_model_len, target.vocab_size) == ("llamacpp", 2048, 8000)
    assert target.discovered["max_model_len"] == "/props n_ctx (per slot)"


def test_overlong_prompts_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    """doc-qa's documents against an engine with a 3000-token context: one line, exit 2."""
    from bench_support import bench_cli

    out = tmp_path / "run"
    done = bench_cli(
        "--workload", "doc-qa", "--num-requests", "6", "--engine", "max_model_len=3000",
        "--gpu-telemetry", "off", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "--allow-overlong" in line
    assert "max_model_len of 3,000 tokens" in line and " of 6 requests" in line
    assert not out.exists()


def test_the_smoke_test_fails_fast_with_the_servers_message(tmp_path: Path) -> None:
    from bench_support import bench_cli

    with EmbeddedServer(EngineConfig(fixed_step_s=0.001, vocab_size=4096)) as server:
        out = tmp_path / "run"
        done = bench_cli(
            "--endpoint", server.url + "/v1", "--workload", "system-prompt", "--num-requests",
            "3", "--model", "no-such-model", "--gpu-telemetry", "off", "--out", str(out),
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "does not exist" in done.stderr and "test request" in done.stderr
        assert not out.exists()
