"""/metrics of the embedded server: vLLM's families, live gauges, and honest latencies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_support import (
    engine_moments,
    fast_config,
    held_steps,
    metric,
    metric_samples,
    pick,
    served,
    wait_for,
)

from simengine.embedded import EmbeddedServer

REQUIRED_VLLM = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:iteration_tokens_total": "histogram",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:cache_config_info": "gauge",
}


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with served() as c:
        yield c


def _families(text: str) -> dict[str, tuple[str, set[str]]]:
    """name → (type, label names other than ``le``) for every family of an exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        out[family.name] = (family.type, labels)
    return out


def test_families_match_a_real_vllm_exposition(client: httpx.Client, fixtures_dir: Path) -> None:
    client.post("/v1/completions", json={"prompt": "warm up", "max_tokens": 3})
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    ours = _families(response.text)
    real = _families((fixtures_dir / "vllm-cpu" / "tiny-metrics-after.prom").read_text())
    for name, kind in REQUIRED_VLLM.items():
        assert ours[name][0] == real[name][0] == kind, name
        if name == "vllm:cache_config_info":
            assert {"block_size", "num_gpu_blocks", "enable_prefix_caching"} <= ours[name][1]
        else:
            assert ours[name][1] == real[name][1] == {"model_name", "engine"}, name
    assert ours["prefillscope_engine_kv_blocks"] == ("gauge", {"model_name", "engine", "state"})
    assert ours["prefillscope_engine_step_seconds"][0] == "histogram"
    assert ours["prefillscope_engine_step_tokens"][1] == {"model_name", "engine", "kind"}
    assert ours["prefillscope_engine_prefix_evictions"][0] == "counter"


def test_gauges_follow_a_stream_and_a_disconnect_frees_its_blocks(client: httpx.Client) -> None:
    generated = metric(client, "vllm:generation_tokens_total")
    body = {"prompt": [300] * 100, "max_tokens": 5000, "ignore_eos": True, "stream": True}
    with client.stream("POST", "/v1/completions", json=body) as response:
        lines = response.iter_lines()
        for _ in range(3):
            assert next(lines).startswith("data: {")
            next(lines)
        samples = metric_samples(client)  # one scrape: the stream keeps going meanwhile
        assert pick(samples, "vllm:num_requests_running") == 1
        active = pick(samples, "prefillscope_engine_kv_blocks", state="active")
        assert active >= 7  # 100 prompt tokens + output, 16 per block
        assert pick(samples, "vllm:kv_cache_usage_perc") == pytest.approx(active / 400)
    wait_for(lambda: metric(client, "vllm:num_requests_running") == 0)
    assert metric(client, "prefillscope_engine_kv_blocks", state="active") == 0
    assert metric(client, "vllm:kv_cache_usage_perc") == 0
    stopped = metric(client, "vllm:generation_tokens_total")
    assert stopped - generated < 1000
    time.sleep(0.05)
    assert metric(client, "vllm:generation_tokens_total") == stopped


def test_step_histograms_by_kind(client: httpx.Client) -> None:
    before = {
        k: metric(client, "prefillscope_engine_step_seconds_count", kind=k)
        for k in ("prefill", "decode")
    }
    iterations = metric(client, "vllm:iteration_tokens_total_count")
    client.post(
        "/v1/completions", json={"prompt": [400] * 50, "max_tokens": 10, "ignore_eos": True}
    )
    prefill = metric(client, "prefillscope_engine_step_seconds_count", kind="prefill")
    decode = metric(client, "prefillscope_engine_step_seconds_count", kind="decode")
    assert prefill - before["prefill"] == 1 and decode - before["decode"] == 9
    assert metric(client, "vllm:iteration_tokens_total_count") - iterations == 10
    mean = metric(client, "prefillscope_engine_step_seconds_sum", kind="decode") / decode
    assert mean == pytest.approx(0.002)  # the fixed step, as scheduled
    assert metric(client, "prefillscope_engine_step_tokens_sum", kind="prefill") >= 50


LATENESS = "prefillscope_engine_step_lateness_seconds"


def test_step_lateness_is_published_as_the_driver_measured_it() -> None:
    """Decode steps held 30 ms on the engine's loop against their modelled 2 ms end at
    least 28 ms late; /metrics counts every timed step and sums the driver's own lateness."""
    with (
        EmbeddedServer(fast_config()) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        assert metric(client, f"{LATENESS}_count") == 0  # published before any step
        with held_steps(server, 0.03):
            body = {"prompt": [400] * 50, "max_tokens": 10, "ignore_eos": True}
            assert client.post("/v1/completions", json=body).status_code == 200
        samples = metric_samples(client)
        assert server.server is not None
        measured = list(server.server.driver.lateness)
    assert pick(samples, f"{LATENESS}_count") == len(measured) == 10  # 1 prefill + 9 decode
    assert pick(samples, f"{LATENESS}_sum") == pytest.approx(sum(measured))
    assert sum(late >= 0.028 for late in measured) == 9  # every held step
    within = pick(samples, f"{LATENESS}_bucket", le="0.02")
    assert within == sum(late <= 0.02 for late in measured) <= 1


async def _timed_streams(url: str, n: int, tokens: int, *, concurrent: bool) -> list[list[float]]:
    """[send time, chunk arrival times…] for ``n`` streams, all at once or one by one."""

    async def one(session: aiohttp.ClientSession, i: int) -> list[float]:
        body = {"prompt": [500 + i] * 20, "max_tokens": tokens, "ignore_eos": True, "stream": True}
        times = [time.perf_counter()]
        async with session.post(f"{url}/v1/completions", json=body) as response:
            async for line in response.content:
                if line.startswith(b"data: {"):
                    times.append(time.perf_counter())
        return times

    async with aiohttp.ClientSession() as session:
        await session.get(f"{url}/health")  # a warm connection: TTFT without the handshake
        if concurrent:
            return await asyncio.gather(*(one(session, i) for i in range(n)))
        return [await one(session, i) for i in range(n)]


def _mean(client: httpx.Client, histogram: str) -> tuple[float, float]:
    samples = metric_samples(client)
    count = pick(samples, f"{histogram}_count")
    return pick(samples, f"{histogram}_sum") / count, count


@pytest.mark.timing
def test_itl_histogram_agrees_with_the_client() -> None:
    """Both sides time the same emissions, so per-token means agree closely (16 streams),
    request by request: the engine's emit moments against the client's arrivals, the
    typical (median) stream compared, as a busy machine stalls a few deliveries."""
    with served(fast_config(fixed_step_s=0.01)) as c, engine_moments() as engine:
        streams = asyncio.run(_timed_streams(str(c.base_url).rstrip("/"), 16, 30, concurrent=True))
        server_itl, count = _mean(c, "vllm:inter_token_latency_seconds")
    assert count == 16 * 29 and len(engine) == 16
    engine_itl = np.array([m.decode_s / (m.emissions - 1) for m in engine])
    assert server_itl == pytest.approx(engine_itl.mean(), rel=1e-9)  # the histogram's own
    client_itl = np.array([(t[-1] - t[1]) / (len(t) - 2) for t in streams])
    assert np.median(client_itl) == pytest.approx(np.median(engine_itl), rel=0.05)
    assert np.median(engine_itl) == pytest.approx(0.01, rel=0.1)


@pytest.mark.timing
def test_ttft_histogram_agrees_with_the_client() -> None:
    """Sequential requests, so the engine's n-th is the client's n-th. The client's wait
    (send to first chunk) contains the engine's (arrival to first emit), request by
    request; the rest is loopback and scheduling, which a busy machine stretches for some
    requests, so the typical (median) request is compared.
    (The server and this client share one process and its GIL, hence the margin.)"""
    with served(fast_config(fixed_step_s=0.01)) as c, engine_moments() as engine:
        streams = asyncio.run(_timed_streams(str(c.base_url).rstrip("/"), 6, 3, concurrent=False))
        server_ttft, count = _mean(c, "vllm:time_to_first_token_seconds")
        e2e, _ = _mean(c, "vllm:e2e_request_latency_seconds")
        decode, _ = _mean(c, "vllm:request_decode_time_seconds")
        queue, _ = _mean(c, "vllm:request_queue_time_seconds")
        prefill, _ = _mean(c, "vllm:request_prefill_time_seconds")
    assert count == 6 and len(engine) == 6
    engine_ttft = np.array([m.ttft_s for m in engine])
    assert server_ttft == pytest.approx(engine_ttft.mean(), rel=1e-9)  # the histogram's own
    client_ttft = np.array([t[1] - t[0] for t in streams])
    assert (client_ttft >= engine_ttft).all(), (client_ttft, engine_ttft)
    assert np.median(client_ttft) == pytest.approx(np.median(engine_ttft), rel=0.15, abs=0.004)
    assert decode == pytest.approx(0.02, rel=0.2)  # two steps after the first token
    assert e2e == pytest.approx(server_ttft + decode, rel=1e-6)
    assert queue + prefill == pytest.approx(server_ttft, rel=1e-6)
    assert prefill > 0.005  # admitted at a step start, its token at that step's end
