"""The KV pool breakdown: measured where exposed, derived or bounded, never free + reclaimable."""

from __future__ import annotations

from repo_paths import FIXTURES

from probes.canonical import Provenance
from probes.exposition import parse_exposition
from probes.mapping import builtin_mapping, detect_flavour
from probes.pool import pool_breakdown
from runfmt.codec import encode

TINY_BEFORE = (FIXTURES / "vllm-cpu/tiny-metrics-before.prom").read_text()
UNDER_LOAD = (FIXTURES / "vllm-cpu/small-metrics-under-load.prom").read_text()


def breakdown(text: str):
    exposition = parse_exposition(text)
    return pool_breakdown(builtin_mapping(detect_flavour(exposition)).snapshot(exposition))


def test_fresh_vllm_server_pins_reclaimable_at_zero():
    pool = breakdown(TINY_BEFORE)
    # Nothing computed yet: no block can hold cached KV, so every unused block is free.
    assert pool.reclaimable.value.value == 0.0
    assert pool.reclaimable.value.provenance is Provenance.DERIVED
    assert pool.free.value.value == 8191.0
    assert pool.free.value.provenance is Provenance.DERIVED
    assert pool.total.value == 8191.0  # 8192 minus vLLM's null block


def test_prefix_caching_disabled_means_no_reclaimable_blocks():
    text = UNDER_LOAD.replace('enable_prefix_caching="True"', 'enable_prefix_caching="False"')
    pool = breakdown(text)
    assert pool.reclaimable.value.value == 0.0
    assert pool.reclaimable.value.source == "prefix caching disabled"
    assert pool.free.value.value == 1364.0 - 70.0


def test_preemptions_void_the_counter_bound():
    text = UNDER_LOAD.replace(
        'vllm:num_preemptions_total{engine="0",model_name="small-llama"} 0.0',
        'vllm:num_preemptions_total{engine="0",model_name="small-llama"} 3.0',
    )
    pool = breakdown(text)
    # Recomputation after a preemption is not in the token counters: only the pool
    # itself bounds the cached blocks now.
    assert pool.reclaimable.bounds == (0.0, 1294.0)
    assert pool.free.bounds == (0.0, 1294.0)
    written = encode(pool.recorded())  # probe --json: the bounds beside the unknown value
    assert written["free_blocks"] == {"value": None, "provenance": "unknown",
                                      "source": pool.free.value.source, "unit": "blocks",
                                      "bounds": [0.0, 1294.0]}  # fmt: skip
    assert pool.reclaimable.value.value is None and pool.free.value.value is None


def test_embedded_engine_buckets_are_measured():
    text = TINY_BEFORE + (
        "# TYPE prefillscope_engine_kv_blocks gauge\n"
        'prefillscope_engine_kv_blocks{engine="0",state="active"} 12\n'
        'prefillscope_engine_kv_blocks{engine="0",state="reclaimable"} 30\n'
        'prefillscope_engine_kv_blocks{engine="0",state="free"} 8150\n'
    )
    pool = breakdown(text)
    assert [pool.active.value.value, pool.reclaimable.value.value, pool.free.value.value] == [
        12.0,
        30.0,
        8150.0,
    ]
    assert {
        pool.active.value.provenance,
        pool.reclaimable.value.provenance,
        pool.free.value.provenance,
    } == {Provenance.MEASURED}
    assert pool.total.value == 8192.0  # the embedded engine reserves no null block


def test_sglang_token_pool_is_measured_when_exposed():
    text = (
        'sglang:kv_used_tokens{model_name="m"} 1000\n'
        'sglang:kv_evictable_tokens{model_name="m"} 5000\n'
        'sglang:kv_available_tokens{model_name="m"} 4000\n'
        'sglang:max_total_num_tokens{model_name="m"} 10000\n'
        'sglang:token_usage{model_name="m"} 0.1\n'
        'sglang:num_running_reqs{model_name="m"} 2\n'
    )
    pool = breakdown(text)
    assert pool.unit == "tokens"
    assert encode(pool.recorded())["reclaimable_blocks"] == {
        "value": 5000.0,
        "provenance": "measured",
        "source": "sglang:kv_evictable_tokens",
        "unit": "tokens",
    }
    assert pool.free.value.value == 4000.0
    assert pool.total.value == 10000.0
