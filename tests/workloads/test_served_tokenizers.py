"""Text prompts tokenized by the server itself on SGLang and llama.cpp, as on vLLM: each
flavour's own tokenize endpoint, called in its own shape, so the prompts' token ids (and
the oracle's expectation) are the server's.

The servers are small stand-ins on 127.0.0.1 that speak each flavour's shape and tokenize
with the embedded engine's tokenizer (llama.cpp: ``/tokenize {content, add_special}`` →
``{tokens}`` with ``add_special`` false unless asked, ``/apply-template {messages}`` →
``{prompt}``; SGLang: ``/tokenize {prompt, add_special_tokens}`` → ``{tokens, count}``,
special tokens added unless told not to, no chat messages)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from loadgen.target import Target
from session.bench_plan import build_bench_plan, plan_tokenizer, resolve_workload
from simengine.tokenizer import Tokenizer
from workloads.errors import InputError
from workloads.tokenizer import LlamaCppTokenizer, PromptTokenizer, chat_messages

MODEL = Tokenizer(32000)


def template(messages: list[dict[str, Any]]) -> str:
    """The stand-in's chat template (ChatML-like, generation prompt included)."""
    turns = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
    return turns + "<|assistant|>\n"


def llamacpp_answer(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if path == "/tokenize" and "content" in body:
        return 200, {
            "tokens": MODEL.encode(body["content"], add_bos=body.get("add_special", False))
        }
    if path == "/apply-template" and "messages" in body:
        return 200, {"prompt": template(body["messages"])}
    return 404, {"error": {"message": "File Not Found"}}


def sglang_answer(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if path == "/tokenize" and isinstance(body.get("prompt"), str):
        ids = MODEL.encode(body["prompt"], add_bos=body.get("add_special_tokens", True))
        return 200, {"tokens": ids, "count": len(ids), "max_model_len": 4096}
    return 400, {"detail": "prompt: field required"}


class Server:
    """A flavour's stand-in in a thread; ``bodies`` holds (path, body) of each request."""

    def __init__(self, answer) -> None:
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append((self.path, body))
                status, reply = answer(self.path, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def llamacpp() -> Iterator[Server]:
    server = Server(llamacpp_answer)
    yield server
    server.close()


@pytest.fixture
def sglang() -> Iterator[Server]:
    server = Server(sglang_answer)
    yield server
    server.close()


TEXT = "the prefix cache keeps blocks of tokens"


def test_llamacpp_text_and_chat_are_tokenized_by_the_server(llamacpp: Server) -> None:
    tok = plan_tokenizer(Target(llamacpp.url, "llamacpp", "llamacpp", "m"))
    assert isinstance(tok, LlamaCppTokenizer)
    assert tok.encode(TEXT) == MODEL.encode(TEXT, add_bos=True)  # as its completions add BOS
    assert tok.encode(TEXT, special=False) == MODEL.encode(TEXT)
    messages = chat_messages(TEXT)
    assert tok.encode_chat(messages) == MODEL.encode(template(messages), add_bos=True)
    assert llamacpp.bodies[0] == ("/tokenize", {"content": TEXT, "add_special": True})
    assert ("/apply-template", {"messages": messages}) in llamacpp.bodies
    tok.close()


def test_sglang_text_is_tokenized_by_the_server_and_chat_is_not_claimed(sglang: Server) -> None:
    tok = plan_tokenizer(Target(sglang.url, "sglang", "sglang", "m"))
    assert isinstance(tok, PromptTokenizer) and not hasattr(tok, "encode_chat")
    assert tok.encode(TEXT) == MODEL.encode(TEXT, add_bos=True)
    assert tok.encode(TEXT, special=False) == MODEL.encode(TEXT)
    path, body = sglang.bodies[0]
    assert path == "/tokenize" and body == {
        "prompt": TEXT,
        "add_special_tokens": True,
        "model": "m",
    }
    tok.close()


@pytest.mark.parametrize(("flavour", "api"), [("llamacpp", "chat"), ("llamacpp", "llamacpp")])
def test_a_text_plan_holds_the_servers_own_token_ids(
    llamacpp: Server, flavour: str, api: str
) -> None:
    target = Target(llamacpp.url, flavour, api, "m", vocab_size=32000)
    overrides = {"num_requests": 6, "seed": 4, "prompt_format": "text"}
    spec, _ = resolve_workload("system-prompt", overrides, api)
    tok = plan_tokenizer(target)
    plan = build_bench_plan(spec, target, text_tokenizer=tok)
    tok.close()
    for request in plan.requests:
        assert request.text is not None
        if api == "chat":
            expected = MODEL.encode(template(chat_messages(request.text)), add_bos=True)
        else:
            expected = MODEL.encode(request.text, add_bos=True)
        assert list(request.prompt.token_ids(32000)) == expected


def test_a_server_without_the_endpoint_is_one_input_error(sglang: Server) -> None:
    tok = LlamaCppTokenizer(sglang.url)  # llama.cpp's shape against SGLang's endpoint
    with pytest.raises(InputError) as info:
        tok.encode(TEXT)
    assert "/tokenize answered HTTP 400" in str(info.value)
    tok.close()
