"""Parsing and mapping every real /metrics capture in tests/fixtures to canonical series.

The expected numbers are the ones the captures hold (see each folder's SOURCES.md /
README.md); a mapping or parser change that misreads any of them fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from repo_paths import FIXTURES

from probes.canonical import Provenance
from probes.exposition import parse_exposition
from probes.mapping import builtin_mapping, detect_flavour, load_mapping
from probes.normalise import ServerSeries
from probes.pool import pool_breakdown
from workloads.errors import InputError

CAPTURES = sorted(
    [
        *FIXTURES.glob("metrics/*.prom"),
        *FIXTURES.glob("vllm-cpu/*.prom"),
        *FIXTURES.glob("llamacpp/metrics-*.txt"),
    ]
)


def expected_flavour(path: Path) -> str:
    if path.parent.name == "llamacpp":
        return "llamacpp"
    return "sglang" if path.name.startswith("sglang") else "vllm"


def snapshot_of(path: Path | str, text: str | None = None):
    exposition = parse_exposition(text if text is not None else Path(path).read_text())
    return builtin_mapping(detect_flavour(exposition)).snapshot(exposition)


def values(snap) -> dict[str, float | None]:
    return {name: v.value for name, v in snap.series.items()}


def test_every_capture_is_collected():
    # 2 in metrics/, 6 in vllm-cpu/, 4 llama.cpp scrapes: a renamed folder must not
    # silently shrink the parametrised test below to nothing.
    assert len(CAPTURES) == 12


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_capture_parses_and_flavour_is_detected(path: Path):
    exposition = parse_exposition(path.read_text())
    assert exposition.samples
    assert detect_flavour(exposition) == expected_flavour(path)
    snap = builtin_mapping(expected_flavour(path)).snapshot(exposition)
    # Every server in the captures reports its running and waiting requests and tokens.
    for name in ("running", "waiting", "prompt_tokens", "generation_tokens"):
        assert snap.series[name].known, name
    # Unknown values are None with a reason, never a 0.
    for value in snap.series.values():
        assert (value.value is None) == (value.provenance is Provenance.UNKNOWN)
        assert value.source


def test_vllm_under_load_capture():
    snap = snapshot_of(FIXTURES / "vllm-cpu/small-metrics-under-load.prom")
    assert values(snap) == {
        "running": 8.0,
        "waiting": 0.0,
        "kv_usage": 0.0513196480938416,
        "prefix_queries": 8000.0,
        "prefix_hits": 0.0,
        "preemptions": 0.0,
        "prompt_tokens": 8000.0,
        "generation_tokens": 240.0,
        "block_size": 128.0,
        "num_blocks": 1365.0,
        "prefix_caching": 1.0,
        # vLLM 0.32's split of the prompt tokens, and of the cached ones by tier.
        "prompt_tokens_computed": 8000.0,
        "prompt_tokens_cached": 0.0,
        "hits_local": 0.0,
        "hits_external": 0.0,
        **{f"hits_tier_{tier}": 0.0 for tier in ("device", "host", "storage", "p2p", "external")},
        "external_prefix_queries": 0.0,
        "external_prefix_hits": 0.0,
        # No KV offload connector, no LMCache, and llama.cpp's own gauges: not exposed.
        **dict.fromkeys(
            (
                "offload_load_bytes",
                "offload_store_bytes",
                "offload_load_seconds",
                "offload_store_seconds",
                "lmcache_requested_tokens",
                "lmcache_hit_tokens",
                "kv_tokens",
                "max_sequence_tokens",
                "host_pool_used_tokens",
                "host_pool_tokens",
                "host_pool_blocks",  # cache_config_info num_cpu_blocks="None": no CPU tier
                "kv_transfer_queue_depth",
                "prefix_evictions",  # vLLM does not count its evictions
            )
        ),
    }
    assert all(v.provenance is Provenance.MEASURED for v in snap.series.values() if v.known)
    assert snap.histograms["ttft"].count == 8
    assert snap.histograms["itl"].count == 232
    assert snap.histograms["e2e"].count == 0  # no request had finished yet
    assert snap.itl_per == "event"
    # kv_cache_usage_perc = used / (num_gpu_blocks - 1 null block): 70 / 1364 exactly.
    pool = pool_breakdown(snap)
    assert pool.active.value.value == 70.0
    assert pool.active.value.provenance is Provenance.DERIVED
    assert pool.total.value == 1364.0
    # vLLM's free queue mixes reclaimable and free: both unknown, bounded, never summed.
    assert pool.reclaimable.value.value is None and pool.free.value.value is None
    # 8000 prompt tokens, no hits, 240 generated: at most 64 full 128-token blocks cached.
    assert pool.reclaimable.bounds == (0.0, 64.0)
    assert pool.free.bounds == (1364 - 70 - 64, 1364 - 70)


def test_vllm_tiny_before_and_after():
    before = snapshot_of(FIXTURES / "vllm-cpu/tiny-metrics-before.prom")
    after = snapshot_of(FIXTURES / "vllm-cpu/tiny-metrics-after.prom")
    assert before.series["prefix_hits"].value == 0.0  # measured zero, not unknown
    assert before.series["prefix_hits"].provenance is Provenance.MEASURED
    assert after.series["prefix_hits"].value == 2432.0
    assert after.series["prefix_queries"].value == 21700.0
    assert after.series["block_size"].value == 128.0
    assert after.series["num_blocks"].value == 8192.0
    series = ServerSeries.from_snapshots([0.0, 30.0], [before, after])
    assert series.increase("prefix_hits").value == 2432.0
    assert series.increase("generation_tokens").value == 1920.0
    assert series.rate("prompt_tokens").value == pytest.approx(21700 / 30)
    ttft = series.histogram_increase("ttft")
    assert ttft.count == 29
    assert 0.0 < ttft.bucket_quantile(0.5) < ttft.bucket_quantile(0.99) <= 1.0


def test_vllm_live_capture_from_a_gpu_server():
    snap = snapshot_of(FIXTURES / "metrics/vllm-v1-2026-09-sparkwrangler-live.prom")
    assert snap.series["prefix_hits"].value == 557536.0
    assert snap.series["prefix_queries"].value == 1124233.0
    assert snap.series["block_size"].value == 2096.0  # hybrid model: not mamba_block_size
    assert snap.series["num_blocks"].value == 953.0
    assert snap.histograms["ttft"].count == 36
    assert snap.histograms["e2e"].count == 34


def test_removed_vllm_names_are_mapped():
    """The same real scrape as an older vLLM spelled it: gpu_cache_usage_perc,
    gpu_prefix_cache_*, and the per-token time_per_output_token_seconds histogram."""
    text = (FIXTURES / "vllm-cpu/small-metrics-under-load.prom").read_text()
    old = (
        text.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        .replace("vllm:prefix_cache_", "vllm:gpu_prefix_cache_")
        .replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
    )
    assert "vllm:kv_cache_usage_perc" not in old
    new_snap = snapshot_of("new", text)
    old_snap = snapshot_of("old", old)
    assert values(old_snap) == values(new_snap)
    assert old_snap.series["kv_usage"].source == "vllm:gpu_cache_usage_perc"
    assert old_snap.histogram_sources["itl"] == "vllm:time_per_output_token_seconds"
    assert old_snap.histograms["itl"] == new_snap.histograms["itl"]


def test_sglang_docs_sample_and_its_traps():
    path = FIXTURES / "metrics/sglang-0.4.3.post2-docs.prom"
    snap = snapshot_of(path)
    assert snap.series["running"].value == 162.0
    assert snap.series["waiting"].value == 2826.0
    assert snap.series["kv_usage"].value == 0.28
    assert snap.series["prompt_tokens"].value == 8128902.0
    assert snap.series["generation_tokens"].value == 7557572.0
    # cache_hit_rate (0.0075) is the last prefill batch only: it must not become the
    # prefix hits of anything. This release has no hit counter, so hits are unknown.
    assert snap.series["prefix_hits"].value is None
    assert snap.series["prefix_hits"].provenance is Provenance.UNKNOWN
    assert snap.histograms["ttft"].count == 11008
    assert snap.histogram_sources["itl"] == "sglang:time_per_output_token_seconds"
    assert snap.itl_per == "token"
    pool = pool_breakdown(snap)
    assert pool.unit == "tokens"
    assert pool.active.value.value == 123859.0
    assert pool.active.value.provenance is Provenance.MEASURED
    assert pool.total.provenance is Provenance.DERIVED  # num_used_tokens / token_usage
    # Scraped through an exporter that spells the prefix sglang_: the same values.
    underscored = snapshot_of("x", path.read_text().replace("sglang:", "sglang_"))
    assert values(underscored) == values(snap)
    assert underscored.histograms == snap.histograms


def test_sglang_hit_counters_when_exposed():
    """Newer SGLang: realtime_tokens_total{mode} gives run-long hits and queries."""
    text = (
        "# TYPE sglang:realtime_tokens_total counter\n"
        'sglang:realtime_tokens_total{mode="prefill_compute",model_name="m"} 700\n'
        'sglang:realtime_tokens_total{mode="prefill_cache",model_name="m"} 300\n'
        'sglang:realtime_tokens_total{mode="decode",model_name="m"} 5000\n'
        "# TYPE sglang:cache_hit_rate gauge\n"
        'sglang:cache_hit_rate{model_name="m"} 0.9\n'
    )
    snap = snapshot_of("x", text)
    assert snap.series["prefix_hits"].value == 300.0
    assert snap.series["prefix_queries"].value == 1000.0
    assert snap.series["prefix_queries"].provenance is Provenance.DERIVED


def test_llamacpp_label_less_counters():
    after = snapshot_of(FIXTURES / "llamacpp/metrics-after.txt")
    assert after.series["prefix_hits"].value == 3029.0
    # llama.cpp's prompt_tokens_total excludes cached tokens: 4861 computed + 3029 cached.
    assert after.series["prompt_tokens"].value == 7890.0
    assert after.series["prompt_tokens"].provenance is Provenance.DERIVED
    assert after.series["generation_tokens"].value == 703.0
    for name in ("kv_usage", "preemptions", "block_size", "num_blocks"):
        assert after.series[name].value is None, name
    assert all(h is None for h in after.histograms.values())
    over = snapshot_of(FIXTURES / "llamacpp/metrics-oversubscribed.txt")
    assert over.series["running"].value == 4.0  # requests_processing
    assert over.series["waiting"].value == 4.0  # requests_deferred
    during = snapshot_of(FIXTURES / "llamacpp/metrics-during.txt")
    series = ServerSeries.from_snapshots([0.0, 1.0], [during, after])
    assert series.increase("generation_tokens").value == 703 - 63


def test_malformed_line_names_the_line():
    text = (FIXTURES / "llamacpp/metrics-after.txt").read_text().splitlines()
    text.insert(5, "llamacpp:broken{mode= 12")
    with pytest.raises(InputError) as err:
        parse_exposition("\n".join(text) + "\n", source="file.prom")
    assert err.value.field == "file.prom"
    assert "line 6" in err.value.problem
    assert "llamacpp:broken" in err.value.problem


USER_MAPPING = """
flavour = "acme"
detect = ["acme_"]

[series.running]
metric = "acme_active_sequences"

[series.waiting]
metric = "acme_queue_depth"

[series.kv_usage]
metric = "acme_kv_percent"
scale = 0.01

[series.prefix_hits]
metric = "acme_reused_tokens_total"

[series.prefix_queries]
sum = ["acme_reused_tokens_total", "acme_computed_tokens_total"]

[series.block_size]
metric = "acme_info"
label = "page"

[histograms.ttft]
metric = "acme_first_token_seconds"

[pool]
unit = "blocks"
active = { metric = "acme_pages", labels = { kind = "pinned" } }
"""

ACME = """# TYPE acme_active_sequences gauge
acme_active_sequences{replica="a"} 3
acme_active_sequences{replica="b"} 2
acme_queue_depth 7
acme_kv_percent 42.5
acme_reused_tokens_total 96
acme_computed_tokens_total 32
acme_info{page="32"} 1
acme_pages{kind="pinned"} 11
acme_pages{kind="other"} 5
# TYPE acme_first_token_seconds histogram
acme_first_token_seconds_bucket{le="0.1"} 1
acme_first_token_seconds_bucket{le="1.0"} 3
acme_first_token_seconds_bucket{le="+Inf"} 4
acme_first_token_seconds_count 4
acme_first_token_seconds_sum 3.5
"""


def test_user_mapping_for_an_own_engine(tmp_path):
    path = tmp_path / "acme.toml"
    path.write_text(USER_MAPPING)
    mapping = load_mapping(path)
    snap = mapping.snapshot(parse_exposition(ACME))
    assert snap.flavour == "acme"
    assert snap.series["running"].value == 5.0  # summed over replicas
    assert snap.series["waiting"].value == 7.0
    assert snap.series["kv_usage"].value == pytest.approx(0.425)
    assert snap.series["prefix_queries"].value == 128.0
    assert snap.series["block_size"].value == 32.0
    assert snap.series["preemptions"].provenance is Provenance.UNKNOWN
    assert snap.histograms["ttft"].count == 4
    assert pool_breakdown(snap).active.value.value == 11.0


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("flavuor = 'x'\n", "flavuor"),
        ("[series.running]\nmetrics = 'a'\n", "series.running: metrics"),
        ("[series.runing]\nmetric = 'a'\n", "series.runing"),
        ("[histograms.ttft]\nmetric = 'a'\nbuckets = 3\n", "histograms.ttft: buckets"),
        ("[pool]\nactiv = 'a'\n", "pool: activ"),
        ("[series.prefix_queries]\nsum = [{metric = 'a', lable = 'b'}]\n", "lable"),
    ],
)
def test_user_mapping_unknown_key_is_named(tmp_path, text, named):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_mapping(path)
    assert named in str(err.value)


def test_user_mapping_bad_values(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[series.running]\nmetric = 'a'\naggregate = 'median'\n")
    with pytest.raises(InputError, match="aggregate"):
        load_mapping(path)
    path.write_text("[series.running\n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_mapping(path)
    with pytest.raises(InputError, match="no such file"):
        load_mapping(tmp_path / "missing.toml")
