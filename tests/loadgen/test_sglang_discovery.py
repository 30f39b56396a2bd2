"""Zero-flag first contact with an SGLang-like server: the model, its context length, its
vocabulary, its model path and how it was started, from SGLang's own endpoints, and
``target.discovered`` saying where each came from.

The server answers as SGLang 0.5.23 does (captured from the CPU target): ``/v1/models``
names the served model and ``max_model_len``; ``/get_model_info`` its ``model_path``;
``/get_server_info`` its ServerArgs (``version``, ``chunked_prefill_size``,
``launch_command``); ``/v1/detokenize`` decodes every id of the vocabulary to text when
``skip_special_tokens`` is off (``<unk>``, ``<s>`` too) and an id past it to ``""``. A
prompt holding an id past the vocabulary kills SGLang 0.5.23, so detection must never
send one: this server's ``/generate`` and ``/v1/completions`` count what they are sent.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web
from loadgen_servers import Server, routes, status_reply

from probes.detect import detect_target

VOCAB = 8192
SPECIAL = 8  # ids 0-7: <unk>, <s>, </s>, <pad>, chat markers (decode to "" when skipped)
PATH = "/models/tiny-llama"
LAUNCH = f"--model-path {PATH} --port 30011 --chunked-prefill-size 512"
PAGE = (
    '# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name="tiny-llama"} 0.0\n'
)


def _json(obj: object):
    return status_reply(200, json.dumps(obj).encode())


@pytest.mark.parametrize("where", ["here", "remote"])
def test_sglang_says_everything_a_run_needs_and_never_gets_an_unknown_id(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if where == "remote":  # no local process to read: SGLang's own launch_command
        monkeypatch.setattr("probes.detect.server_process", lambda host, port: None)
    generated: list[object] = []
    asked: list[dict] = []

    async def detokenize(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        asked.append(body)
        (token,) = body["tokens"]
        skip = body.get("skip_special_tokens", True)
        text = "" if token >= VOCAB or (token < SPECIAL and skip) else f"<{token}>"
        return web.json_response({"text": text})

    async def generate(request: web.Request) -> web.StreamResponse:
        generated.append(await request.json())
        return web.json_response({"error": "must not be called"}, status=500)

    async def metrics(request: web.Request) -> web.StreamResponse:
        return web.Response(text=PAGE, content_type="text/plain")

    models = {"data": [{"id": "tiny-llama", "owned_by": "sglang", "root": "tiny-llama",
                        "max_model_len": 4096}]}  # fmt: skip
    paths = {
        "/v1/models": _json(models),
        "/metrics": metrics,
        "/get_model_info": _json({"model_path": PATH, "tokenizer_path": PATH}),
        "/get_server_info": _json(
            {"version": "0.5.23", "chunked_prefill_size": 512, "launch_command": LAUNCH}
        ),
        "/v1/detokenize": detokenize,
        "/generate": generate,
        "/v1/completions": generate,
    }

    async def go():
        async with Server(routes(paths, status_reply(404, b"{}"))) as url:
            return await detect_target(url)

    target = asyncio.run(go())
    assert (target.flavour, target.model) == ("sglang", "tiny-llama")
    assert target.vocab_size == VOCAB and target.max_model_len == 4096
    assert generated == []  # the bound was not sent in a prompt
    assert all(body["skip_special_tokens"] is False for body in asked)
    assert len(asked) < 40
    discovered = dict(target.discovered)
    assert discovered.pop("command").startswith(
        "/proc/PID/cmdline" if where == "here" else "/get_server_info launch_command"
    )
    assert discovered == {
        "model": "/v1/models data[0].id",
        "max_model_len": "/v1/models max_model_len",
        "vocab_size": f"/v1/detokenize (every id below it decodes, {VOCAB} does not)",
        "model_path": "/get_model_info model_path",
    }
    info = target.server_info
    assert info["model_path"] == PATH and info["chunk_budget"] == 512
    assert info["version"] == "0.5.23"
    if where == "here":  # this test process serves the fake server
        own = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode()
        assert info["command"][0] == own
    else:
        assert info["command"] == ["python", "-m", "sglang.launch_server", *LAUNCH.split()]
