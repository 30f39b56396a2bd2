"""``loadgen.smoke``: one small request before a run, failing at once in the server's
own words; against real HTTP servers on 127.0.0.1 answering with real captures."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from repo_paths import FIXTURES

from loadgen.adapters import RequestParams
from loadgen.smoke import smoke_request, smoke_test
from loadgen.target import Target
from workloads.errors import InputError

STREAM = (FIXTURES / "vllm-cpu" / "completions-stream-include-usage.sse").read_bytes()
NOT_FOUND = (FIXTURES / "vllm-cpu" / "error-404-model.json").read_bytes()


def test_a_token_smoke_request_spans_the_vocabulary_and_asks_one_token():
    target = Target("http://127.0.0.1:9", "vllm", "completions", "m", vocab_size=32000)
    request = smoke_request(target, token_ids=True)
    assert list(request.prompt.token_ids(2**31)) == [1, 31999] and request.max_tokens == 1
    assert smoke_request(target, token_ids=False).text == "Hello"


async def _smoke(status: int, body: bytes) -> list[dict]:
    bodies: list[dict] = []

    async def handle(request: web.Request) -> web.Response:
        bodies.append(await request.json())
        return web.Response(status=status, body=body, content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/v1/completions", handle)
    async with TestServer(app, host="127.0.0.1") as server:
        target = Target(str(server.make_url("/")), "vllm", "completions", "m", vocab_size=100)
        await smoke_test(target, token_ids=True, params=RequestParams(), timeout_s=10)
    return bodies


def test_a_server_that_streams_a_whole_answer_passes_and_got_the_runs_request_shape():
    (body,) = asyncio.run(_smoke(200, STREAM))
    assert body["prompt"] == [1, 99] and body["max_tokens"] == 1 and body["stream"] is True


@pytest.mark.parametrize(
    ("status", "body", "words", "fix"),
    [
        (404, NOT_FOUND, "HTTP 404: The model `nope` does not exist", "check --model and --api"),
        (401, b'{"error": "Unauthorized"}', "HTTP 401: Unauthorized", "API key"),
        (500, b"<html>boom</html>", "HTTP 500: <html>boom</html>", None),
        (200, STREAM[: STREAM.rindex(b"data: [DONE]")], "ended before its end-of-stream", None),
    ],
)
def test_a_failing_test_request_is_one_line_in_the_servers_words(status, body, words, fix):
    with pytest.raises(InputError) as err:
        asyncio.run(_smoke(status, body))
    assert err.value.field == "--endpoint"
    assert "the test request (POST /v1/completions, one output token) failed" in err.value.problem
    assert words in err.value.problem
    assert (fix in err.value.fix) if fix else err.value.fix is None


def test_an_unreachable_server_names_the_endpoint():
    target = Target("http://127.0.0.1:9", "vllm", "completions", "m", vocab_size=100)
    with pytest.raises(InputError) as err:
        asyncio.run(smoke_test(target, token_ids=True, params=RequestParams(), timeout_s=5))
    assert err.value.field == "--endpoint"
