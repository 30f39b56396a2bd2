"""``bench`` against the embedded engine with a CPU offload tier: ``summary.json`` splits
the cached prompt tokens by the tier that served them from the engine's own counters
(``prefillscope_engine_prefix_hits_by_tier_total``: the GPU pool as ``device``, the offload
tier as ``host``), beside the oracle's predicted split, and the two agree.

Four 512-token prefixes sent one at a time through a 90-block pool: the GPU keeps about
two of them, so the others come back from the offload tier."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import read_json
from diagnose_bench import bench

WORKLOAD = {"groups": 4, "prefix_len": 512, "num_requests": 48, "concurrency": 1, "seed": 0}
ENGINE = ["num_gpu_blocks=90", "fixed_step_s=0.001"]


@pytest.mark.slow
def test_the_summary_splits_the_hits_by_the_engines_own_tiers(tmp_path: Path) -> None:
    run = bench(tmp_path / "run", "shared-prefix", WORKLOAD, [*ENGINE, "offload_gb=1"])
    summary = read_json(run, "summary.json")
    hits = summary["server"]["hits_by_source"]
    assert hits["reported"] and set(hits["tiers"]) == {"device", "host"}, hits
    device = hits["tiers"]["device"]["tokens"]
    host = hits["tiers"]["host"]["tokens"]
    print(f"hits by tier: device {device['value']:.0f}, host {host['value']:.0f}")
    assert device["provenance"] == host["provenance"] == "measured"
    assert host["source"].endswith('prefix_hits_by_tier_total{tier="cpu"}')
    assert host["value"] > 0 and device["value"] > 0  # both tiers served hits
    assert device["value"] + host["value"] == summary["server"]["prefix"]["hits"]["value"]
    prompt = summary["server"]["prefix"]["queries"]["value"]
    predicted = summary["prefix"]["expected_hit_rate_by_tier"]
    assert host["value"] / prompt == pytest.approx(predicted["cpu"])
    assert device["value"] / prompt == pytest.approx(predicted["gpu"])
