"""What a real vLLM server tells us, read through our detection and ``prefillscope probe``.

Against the session's vLLM CPU target: the flavour is ``vllm`` both for the load
generator's detection and for the metric mapping (the embedded engine also exports
``vllm:`` names, so this is a real distinction); ``probe URL --json``, run as a command,
reads every canonical series as ``measured``, with vLLM's block size (128 on CPU) and
pool size from ``vllm:cache_config_info``; and its counters move exactly as the requests
sent between two probes say they must.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from real_target_runs import probe
from real_vllm import BLOCK_SIZE, MODEL, VOCAB_SIZE

from probes.detect import detect_target
from probes.exposition import fetch_exposition_sync
from probes.mapping import detect_flavour

pytestmark = pytest.mark.real_vllm

SERIES = ("running", "waiting", "kv_usage", "prefix_queries", "prefix_hits", "preemptions")
SERIES += ("prompt_tokens", "generation_tokens", "block_size", "num_blocks")
#: A prompt of two full 128-token blocks and a partial one; sent twice, the second hits 256.
PAIR_PROMPT = list(range(1000, 1300))
#: A stream in flight while ``probe`` scrapes: as long as max_model_len allows (~25 s).
STREAM_PROMPT, STREAM_TOKENS = list(range(2000, 2096)), 4000
ATTEMPTS = 3


def family_samples(url: str, name: str) -> list[Any]:
    """The samples of one metric family, read straight from /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        if family.name == name:
            return family.samples
    raise AssertionError(f"no {name} on /metrics")


def read_stream(url: str, generating: threading.Event, stop: threading.Event) -> None:
    """Stream one long completion, reading it until it ends or ``stop`` is set."""
    body = {"model": MODEL, "prompt": STREAM_PROMPT, "max_tokens": STREAM_TOKENS}
    body |= {"stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as reply:
        for _ in reply.iter_raw(1 << 16):
            generating.set()
            if stop.is_set():
                return  # closing the stream aborts the request


def probe_during_a_stream(url: str) -> tuple[dict[str, Any], int]:
    """``probe`` while one long stream generates, and how many streams that took.

    The stream is read on a thread, as a client would: one left unread backs vLLM up and
    starves everything else on two cores. The probe, a new Python process, may still
    start slowly on a loaded machine, so it counts only if the stream (started before
    it) was still running when it returned; else it is tried again with a new stream.
    """
    for attempt in range(1, ATTEMPTS + 1):
        generating, stop = threading.Event(), threading.Event()
        reader = threading.Thread(target=read_stream, args=(url, generating, stop), daemon=True)
        reader.start()
        try:
            assert generating.wait(60), "the stream never started"
            report = probe(url)
            overlapped = family_samples(url, "vllm:num_requests_running")[0].value == 1
        finally:
            stop.set()
            reader.join(60)
        if overlapped:
            return report, attempt
    pytest.fail(f"no probe finished within a {STREAM_TOKENS}-token stream in {ATTEMPTS} tries")


def test_the_target_is_detected_as_vllm(vllm_url: str) -> None:
    target = asyncio.run(detect_target(vllm_url, vocab_size=VOCAB_SIZE))
    assert target.flavour == "vllm"
    assert target.api == "completions" and target.model == MODEL
    assert target.server_info["version"].startswith("0.")
    assert detect_flavour(fetch_exposition_sync(f"{vllm_url}/metrics")) == "vllm"


def test_probe_reads_the_canonical_series_of_a_live_server(vllm_url: str) -> None:
    before = probe(vllm_url)
    for _ in range(2):
        body = {"model": MODEL, "prompt": PAIR_PROMPT, "max_tokens": 1}
        assert httpx.post(f"{vllm_url}/v1/completions", json=body, timeout=120).status_code == 200
    during, streams = probe_during_a_stream(vllm_url)
    cache_config = family_samples(vllm_url, "vllm:cache_config_info")[0].labels

    assert during["flavour"] == "vllm"
    series = during["series"]
    for name in SERIES:
        assert series[name]["provenance"] == "measured", (name, series[name])
    assert series["running"]["value"] == 1 and series["waiting"]["value"] == 0
    assert series["kv_usage"]["value"] > 0
    assert series["block_size"]["value"] == BLOCK_SIZE
    assert series["num_blocks"]["value"] == int(cache_config["num_gpu_blocks"])

    def moved(name: str) -> float:
        return series[name]["value"] - before["series"][name]["value"]

    # vLLM counts queried and hit prompt tokens; only full blocks hit.
    prompted = 2 * len(PAIR_PROMPT) + streams * len(STREAM_PROMPT)
    assert moved("prefix_queries") == moved("prompt_tokens") == prompted
    assert moved("prefix_hits") == 2 * BLOCK_SIZE
    assert moved("generation_tokens") > 0

    for name in ("ttft", "itl"):
        histogram = during["histograms"][name]
        assert histogram["provenance"] == "measured", histogram
        assert histogram["count"] > before["histograms"][name]["count"]
    assert during["itl_per"] == "event"
