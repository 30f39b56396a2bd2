"""EmbeddedServer: the engine on a background thread, as bench and the tests use it."""

from __future__ import annotations

import gc
import threading
import time

import httpx
import pytest
from server_support import fast_config, metric, served, stream_events, wait_for

from perfmodel.config import EngineConfig
from simengine.embedded import EmbeddedServer
from simengine.openai_responses import ResponseShaper
from workloads.errors import InputError


def test_two_servers_are_independent() -> None:
    with EmbeddedServer(fast_config()) as a, EmbeddedServer(fast_config(block_size=32)) as b:
        assert a.url != b.url and a.url.startswith("http://127.0.0.1:")
        assert a.config.block_size == 16 and b.config.block_size == 32
        with httpx.Client(base_url=a.url) as ca, httpx.Client(base_url=b.url) as cb:
            ca.post("/v1/completions", json={"prompt": [300] * 40, "max_tokens": 2})
            assert metric(ca, "vllm:prompt_tokens_total") == 40
            assert metric(cb, "vllm:prompt_tokens_total") == 0  # its own registry


def test_a_bad_config_fails_start_with_the_input_error() -> None:
    with pytest.raises(InputError, match=r"^block_size: "):
        EmbeddedServer(EngineConfig(block_size=0)).start()


def test_stop_does_not_wait_for_streams_in_flight() -> None:
    server = EmbeddedServer(fast_config()).start()
    outcome: list[str] = []

    def read_forever() -> None:
        body = {"prompt": "x", "max_tokens": 5000, "ignore_eos": True, "stream": True}
        try:
            with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
                for _ in r.iter_lines():
                    pass
            outcome.append("finished")
        except httpx.HTTPError:
            outcome.append("cut")

    reader = threading.Thread(target=read_forever)
    reader.start()
    time.sleep(0.3)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 5  # the stream alone would run for 10 s
    reader.join(timeout=10)
    assert outcome == ["cut"]
    server.stop()  # twice is harmless


def test_gc_is_tuned_while_serving_and_restored_after() -> None:
    before = gc.get_threshold()
    with EmbeddedServer(fast_config()):
        assert gc.get_threshold()[0] == 20_000
        assert gc.get_freeze_count() > 0
        with EmbeddedServer(fast_config()):
            pass
        assert gc.get_threshold()[0] == 20_000  # the outer engine still serves
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_failing_stream_is_cut_and_the_engine_keeps_serving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = ResponseShaper.chunk

    def chunk(self: ResponseShaper, tokens: list, reason: str | None) -> bytes:
        if self.req.engine.prompt_token_ids[0] == 999:
            raise RuntimeError("planted formatting failure")
        return original(self, tokens, reason)

    monkeypatch.setattr(ResponseShaper, "chunk", chunk)
    body = {"max_tokens": 50, "ignore_eos": True, "stream": True}
    with served() as client:
        with (
            pytest.raises(httpx.RemoteProtocolError),
            client.stream("POST", "/v1/completions", json=body | {"prompt": [999, 5]}) as r,
        ):
            r.read()
        events = stream_events(client, "/v1/completions", body | {"prompt": [998, 5]})
        assert sum(len(e["choices"]) for e in events) == 50
        wait_for(lambda: metric(client, "prefillscope_engine_kv_blocks", state="active") == 0)
