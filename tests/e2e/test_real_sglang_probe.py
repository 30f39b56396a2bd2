"""``prefillscope probe`` and detection against the real SGLang CPU target.

The flavour is detected from SGLang's own page, and every value probe reports is checked
against the raw ``/metrics`` text read right after it, with the server idle (so nothing
moves in between). A healthy SGLang has not created the counters it creates at their
first increment (``num_retracted_requests_total`` before any retraction): probe reads
them 0 where the page shows SGLang counts them, and says "unknown" only for a series
whose metric (or the evidence that it is 0) is nowhere on the page.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from real_sglang import MAX_MODEL_LEN, MODEL, MODEL_DIR, PAGE_SIZE, VOCAB_SIZE
from real_target_runs import probe

from probes.detect import detect_target
from probes.exposition import parse_exposition
from probes.mapping import builtin_mapping, detect_flavour

pytestmark = pytest.mark.real_sglang

PROMPT = list(range(1000, 1300))


def page(url: str) -> str:
    return httpx.get(f"{url}/metrics", timeout=30).text


def value(text: str, name: str, **labels: str) -> float | None:
    """The sum of the samples of ``name`` whose labels include ``labels``; None if none."""
    found = [
        s.value
        for s in parse_exposition(text).get(name)
        if all(s.labels.get(k, "") == v for k, v in labels.items())  # absent is "", as PromQL
    ]
    return sum(found) if found else None


def test_sglang_is_detected_and_its_model_discovered(sglang_url: str) -> None:
    assert detect_flavour(parse_exposition(page(sglang_url))) == "sglang"
    target = asyncio.run(detect_target(sglang_url))
    assert (target.flavour, target.api, target.model) == ("sglang", "sglang", MODEL)
    assert target.vocab_size == VOCAB_SIZE and target.max_model_len == MAX_MODEL_LEN
    assert target.discovered["vocab_size"].startswith("/v1/detokenize")
    assert target.server_info["model_path"] == str(MODEL_DIR)
    assert target.server_info["version"] == "0.5.23"


def test_probe_of_a_healthy_sglang_matches_its_raw_page(sglang_url: str) -> None:
    for _ in range(2):  # the second is served from the first's prefix
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1}}
        assert httpx.post(f"{sglang_url}/generate", json=body, timeout=300).status_code == 200
    report = probe(sglang_url)
    text = page(sglang_url)
    series = report["series"]
    print("\nprobe of a healthy SGLang:")
    for name, entry in series.items():
        print(f"  {name:26} {entry['value']!s:>10} {entry['provenance']:9} {entry['source']}")
    assert report["flavour"] == "sglang"
    expected = {
        "running": value(text, "sglang:num_running_reqs", priority=""),
        "waiting": value(text, "sglang:num_queue_reqs", priority=""),
        "kv_usage": value(text, "sglang:token_usage"),
        "block_size": value(text, "sglang:page_size"),
        "num_blocks": value(text, "sglang:num_pages"),
        "prompt_tokens": value(text, "sglang:prompt_tokens_total"),
        "generation_tokens": value(text, "sglang:generation_tokens_total"),
        "prefix_hits": value(text, "sglang:realtime_tokens_total", mode="prefill_cache"),
    }
    for name, raw in expected.items():
        assert raw is not None, f"{name}: the page has no sample for it"
        assert series[name]["value"] == pytest.approx(raw), (name, series[name], raw)
        assert series[name]["provenance"] == "measured", (name, series[name])
    computed = value(text, "sglang:realtime_tokens_total", mode="prefill_compute")
    assert series["prefix_queries"]["value"] == pytest.approx(expected["prefix_hits"] + computed)
    assert series["block_size"]["value"] == PAGE_SIZE
    assert expected["prefix_hits"] >= len(PROMPT) - 1


def test_a_zero_sglang_has_not_created_reads_zero_and_unknown_means_absent(
    sglang_url: str,
) -> None:
    report, text = probe(sglang_url), page(sglang_url)
    exposition = parse_exposition(text)
    # a healthy run retracts nothing: the counter is not on the page, its gauge says 0
    assert not exposition.get("sglang:num_retracted_requests_total")
    assert value(text, "sglang:num_retracted_reqs") == 0.0
    preemptions = report["series"]["preemptions"]
    assert (preemptions["value"], preemptions["provenance"]) == (0.0, "measured")
    # "unknown" only where the page carries none of the metrics the mapping reads for it
    mapping = builtin_mapping("sglang")
    for name, entry in report["series"].items():
        if entry["provenance"] != "unknown" or name not in mapping.series:
            continue
        names = mapping.series[name].metric_names()
        spelled = {s for n in names for s in mapping.spellings(n)}
        assert not spelled & exposition.names(), (name, spelled & exposition.names())
