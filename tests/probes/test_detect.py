"""Flavour detection from what real servers answer (captures, and the embedded engine itself)."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web
from loadgen_servers import Server, routes, run_against, specs
from repo_paths import FIXTURES

from perfmodel.config import EngineConfig
from probes.detect import detect_target
from probes.exposition import parse_exposition
from probes.mapping import detect_flavour
from simengine.embedded import EmbeddedServer
from workloads.errors import InputError

VLLM_MODELS = {"object": "list", "data": [{"id": "tiny-llama", "owned_by": "vllm"}]}


def _body(content: bytes | str, content_type: str):
    async def handler(request: web.Request) -> web.StreamResponse:
        data = content.encode() if isinstance(content, str) else content
        return web.Response(body=data, content_type=content_type)

    return handler


def _json(obj: object):
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response(obj)

    return handler


async def _not_found(request: web.Request) -> web.StreamResponse:
    return web.json_response({"detail": "Not Found"}, status=404)


def _detect(paths: dict, **kwargs):
    async def go():
        async with Server(routes(paths, _not_found)) as url:
            return await detect_target(url, **kwargs)

    return asyncio.run(go())


def test_vllm_by_metric_names() -> None:
    metrics = (FIXTURES / "vllm-cpu" / "tiny-metrics-before.prom").read_text()
    target = _detect(
        {
            "/v1/models": _json(VLLM_MODELS),
            "/metrics": _body(metrics, "text/plain"),
            "/version": _json({"version": "0.32.0"}),
        },
        vocab_size=8192,
    )
    assert (target.flavour, target.api, target.model) == ("vllm", "completions", "tiny-llama")
    assert target.server_info["version"] == "0.32.0" and target.vocab_size == 8192


def test_llamacpp_by_metrics_with_vocab_from_models() -> None:
    models = (FIXTURES / "llamacpp" / "v1-models.json").read_bytes()
    metrics = (FIXTURES / "llamacpp" / "metrics-before.txt").read_text()
    props = (FIXTURES / "llamacpp" / "props.json").read_bytes()
    target = _detect(
        {
            "/v1/models": _body(models, "application/json"),
            "/metrics": _body(metrics, "text/plain"),
            "/props": _body(props, "application/json"),
        }
    )
    assert (target.flavour, target.api) == ("llamacpp", "llamacpp")
    assert target.vocab_size == 8000  # from the model's meta
    assert target.model == "/models/small-llama-12L-768d-q8_0.gguf"


def test_llamacpp_by_props_when_metrics_are_off() -> None:
    models = (FIXTURES / "llamacpp" / "v1-models.json").read_text().replace("llamacpp", "x")
    props = (FIXTURES / "llamacpp" / "props.json").read_bytes()
    target = _detect(
        {
            "/v1/models": _body(models, "application/json"),
            "/props": _body(props, "application/json"),
        }
    )
    assert target.flavour == "llamacpp"


def test_sglang_by_metric_names_and_by_model_info() -> None:
    metrics = (FIXTURES / "metrics" / "sglang-0.4.3.post2-docs.prom").read_text()
    models = {"data": [{"id": "meta-llama/Llama-3.1-8B-Instruct", "owned_by": "x"}]}
    assert (
        _detect({"/v1/models": _json(models), "/metrics": _body(metrics, "text/plain")}).flavour
        == "sglang"
    )
    underscored = metrics.replace("sglang:", "sglang_")
    assert (
        _detect({"/v1/models": _json(models), "/metrics": _body(underscored, "text/plain")}).api
        == "sglang"
    )
    info = {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "is_generation": True}
    assert (
        _detect({"/v1/models": _json(models), "/get_model_info": _json(info)}).flavour == "sglang"
    )


def test_plain_openai_and_overrides() -> None:
    models = {"data": [{"id": "gpt-x", "owned_by": "someone"}]}
    target = _detect({"/v1/models": _json(models)}, api="chat")
    assert (target.flavour, target.api, target.model) == ("openai", "chat", "gpt-x")
    forced = _detect({"/v1/models": _json(models)}, backend="vllm", model="other")
    assert (forced.flavour, forced.model) == ("vllm", "other")


def test_detection_keeps_what_metrics_answered_for_the_probes() -> None:
    """The one GET /metrics of detection is kept on the Target: 404 tells the probes there
    is no page to scrape; 200 that there is; a forced backend asks nothing."""
    models = {"data": [{"id": "gpt-x", "owned_by": "someone"}]}
    assert _detect({"/v1/models": _json(models)}).metrics_status == 404
    metrics = (FIXTURES / "vllm-cpu" / "tiny-metrics-before.prom").read_text()
    served = {"/v1/models": _json(models), "/metrics": _body(metrics, "text/plain")}
    assert _detect(served).metrics_status == 200
    assert _detect(served, backend="vllm").metrics_status is None


def test_the_embedded_engine_is_recognised_and_driven() -> None:
    with EmbeddedServer(EngineConfig(fixed_step_s=0.001, vocab_size=4096)) as server:
        target = asyncio.run(detect_target(server.url))
        assert target.flavour == "embedded" and target.api == "completions"
        assert target.server_info.get("version")
        assert target.vocab_size == 4096  # from /v1/models, not from the caller


def test_unreachable_endpoint_is_one_line_input_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(InputError) as info:
        asyncio.run(detect_target(f"http://127.0.0.1:{port}"))
    assert info.value.field == "--endpoint" and "\n" not in str(info.value)


def test_unauthorised_asks_for_the_api_key() -> None:
    async def refuse(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": "unauthorised"}, status=401)

    with pytest.raises(InputError) as info:
        _detect({"/v1/models": refuse}, api_key="wrong-key")
    assert info.value.field == "--api-key" and "wrong-key" not in str(info.value)


def test_a_run_against_the_embedded_engine(tmp_path: Path) -> None:
    """End to end: the engine's real stream, usage and cache report through the load generator."""
    with EmbeddedServer(EngineConfig(fixed_step_s=0.002, vocab_size=4096)) as server:
        plan = specs(6, prompt_len=64, max_tokens=8, gap_s=0.01)
        # one shared 64-token prompt: later requests hit the cache
        plan = [replace(spec, prompt=plan[0].prompt) for spec in plan]

        async def go():
            target = await detect_target(server.url, vocab_size=4096)
            return await run_against(
                server.url,
                plan,
                tmp_path,
                flavour=target.flavour,
                model=target.model,
                cache_protocol="reset",
            )

        result, requests, chunks, _ = asyncio.run(go())
    assert result.status == "complete" and result.cache_protocol.applied == "reset"
    assert (requests["status"] == "ok").all(), requests["error_message"].tolist()
    assert (requests["output_tokens"] == 8).all() and int(chunks["n_tokens"].sum()) == 48
    assert set(requests["token_count_method"]) == {"usage"}
    assert requests["cached_tokens"].notna().all()
    assert requests.sort_values("intended_s")["cached_tokens"].iloc[-1] > 0


@pytest.mark.parametrize(
    ("page", "flavour"),
    [
        ("# TYPE vllm_num_requests_running gauge\nvllm_num_requests_running 0\n", "vllm"),
        ("# TYPE llamacpp_requests_processing gauge\nllamacpp_requests_processing 1\n", "llamacpp"),
        ("# TYPE sglang_num_running_reqs gauge\nsglang_num_running_reqs 2\n", "sglang"),
    ],
)
def test_metric_names_as_a_prometheus_server_spells_them(page: str, flavour: str) -> None:
    """``vllm_``/``llamacpp_`` (':' escaped) are recognised as the mapping files say, so the
    target and the probe's mapping agree on the flavour."""
    owned = {"object": "list", "data": [{"id": "m", "owned_by": "someone"}]}
    target = _detect({"/v1/models": _json(owned), "/metrics": _body(page, "text/plain")})
    assert target.flavour == flavour
    assert detect_flavour(parse_exposition(page)) == flavour


def test_a_page_that_does_not_parse_falls_back_to_the_other_evidence() -> None:
    target = _detect({"/v1/models": _json(VLLM_MODELS), "/metrics": _body("{oops", "text/plain")})
    assert target.flavour == "vllm"  # from owned_by
