"""Prefix-cache and memory verdicts on real runs of the embedded engine.

Planted: a KV pool (200 blocks) smaller than the prefix working set (8 prefixes of 64
blocks); a per-request ``cache_salt`` over requests that share two prefixes; a large
pool (4000 blocks) that a stream of distinct prompts leaves mostly reclaimable. Each run
uses budget 512, so prefill chunks stay out of the picture — except the issue's shape:
8 groups of 5k-token prefixes on 875 blocks (a third of their working set) with budget
6144, at 1.5 req/s (no overload), where the pool thrashes, preempts and stretches steps.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import pytest
from diagnose_bench import bench, dry_run, evidence_value, side_by_side, suggested_reruns

from diagnose.checklist import run_checklist
from diagnose.context import DiagnoseOptions
from runfmt.diagnosis import CacheHealth, Status

OPTIONS = DiagnoseOptions(resamples=400)
SHARED = {"seed": 1, "prefix_len": 1024, "suffix_len": 64, "output_len": 8}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("engine-cache")
    small = ["max_num_batched_tokens=512"]
    return side_by_side(
        {
            "thrash": partial(
                bench,
                root / "thrash",
                "shared-prefix",
                SHARED | {"num_requests": 48, "concurrency": 2, "groups": 8},
                [*small, "num_gpu_blocks=200"],
            ),
            "salt": partial(
                bench,
                root / "salt",
                "shared-prefix",
                SHARED
                | {
                    "num_requests": 40,
                    "rate": 20,
                    "groups": 2,
                    "tenants": 1000,
                    "tenant_per": "request",
                },
                small,
            ),
            "pool-third": partial(
                bench,
                root / "pool-third",
                "shared-prefix",
                {"seed": 2, "prefix_len": 5000, "suffix_len": 64, "output_len": 64}
                | {"num_requests": 48, "rate": 1.5, "groups": 8},
                ["max_num_batched_tokens=6144", "num_gpu_blocks=875"],
            ),
            "reserved": partial(
                bench,
                root / "reserved",
                "shared-prefix",
                SHARED | {"num_requests": 40, "concurrency": 2, "groups": 40},
                [*small, "num_gpu_blocks=4000"],
            ),
        }
    )


def test_a_pool_smaller_than_the_working_set_thrashes(runs):
    cache = run_checklist(runs["thrash"], OPTIONS).prefix_cache
    assert cache.status == CacheHealth.THRASHING, cache.summary
    unbounded = evidence_value(cache, "unbounded-pool hit rate (oracle)")
    observed = evidence_value(cache, "observed hit rate")
    assert unbounded > 70 and observed < 0.7 * unbounded
    assert evidence_value(cache, "prefix-cache evictions") > 0
    assert evidence_value(cache, "KV pool") == 200 < evidence_value(cache, "prefix working set")
    assert "num_gpu_blocks=" in cache.next


def test_a_pool_a_third_of_the_working_set_is_named_the_one_cause_and_changed(
    runs, monkeypatch, capsys
):
    """Primary: the cache, for the latency its lost reuse explains, naming the pool size as
    the one cause of what H4 and H1 see; the decision changes the pool or the prefixes —
    never the rate, which leaves the prefixes' blocks as they are."""
    diagnosis = run_checklist(runs["pool-third"], OPTIONS)
    cache, memory = diagnosis.prefix_cache, diagnosis.hypothesis("H4")
    assert cache.status == CacheHealth.THRASHING, cache.summary
    assert (diagnosis.primary.finding, diagnosis.primary.confidence) == ("PC", "strong")
    assert "one root cause: the KV pool size (875 blocks, " in diagnosis.primary.why
    assert cache.cost_s > 0 and "prompt tokens a cache should have served" in cache.cost_how
    if memory.status == Status.SUPPORTED:  # preemptions counted: the same pool
        assert "H4" in cache.explains and "Explained by PC" in memory.summary
        assert cache.cost_s > memory.cost_s  # the lost reuse outweighs what preemption redid
    recommendation = diagnosis.decision.recommendation
    assert recommendation.startswith("Fix the prefix cache first")
    assert "--engine num_gpu_blocks=" in recommendation and "--set groups=" in recommendation
    assert "--rate 1.5" in recommendation and "--rate 0.75" not in recommendation
    bigger, fewer = recommendation.split(" — ")
    # the pool the sentence names is the one its command runs
    named = re.search(
        r"Compare with a pool of (\d+) blocks, twice the working set \((\d+)\)", bigger
    )
    assert named is not None, bigger
    assert re.search(rf"--engine num_gpu_blocks={named[1]}\b", bigger), bigger
    assert abs(int(named[1]) - 2 * int(named[2])) <= 1
    assert fewer.startswith("or keep the pool and send fewer distinct prefixes (")
    for step in (bigger, fewer):  # both are commands bench accepts
        command = step[step.index("prefillscope bench") :]
        assert dry_run(command, monkeypatch, capsys)["requests"] == 48


def test_a_per_request_salt_is_an_identity_mismatch(runs):
    diagnosis = run_checklist(runs["salt"], OPTIONS)
    cache = diagnosis.prefix_cache
    assert cache.status == CacheHealth.IDENTITY_MISMATCH, cache.summary
    assert evidence_value(cache, "unscoped hit rate (oracle)") > 80
    assert evidence_value(cache, "observed hit rate") < 5
    assert evidence_value(cache, "requests with a tenant no other request has") > 90
    supported = [h.id for h in diagnosis.hypotheses if h.status == Status.SUPPORTED]
    assert supported == []


def test_a_large_mostly_reclaimable_pool_is_reservation_not_exhaustion(runs):
    diagnosis = run_checklist(runs["reserved"], OPTIONS)
    h4 = diagnosis.hypothesis("H4")
    assert h4.status == Status.NOT_SUPPORTED
    assert h4.summary.startswith("Reservation, not exhaustion: no preemptions")
    assert evidence_value(h4, "preemptions") == 0
    assert evidence_value(h4, "active blocks (peak)") < 10
    reclaimable = evidence_value(h4, "reclaimable blocks (mean)")
    assert reclaimable > evidence_value(h4, "active blocks (peak)")
    provenance = {e.name: e.source for e in h4.evidence}
    assert "(measured)" in provenance["reclaimable blocks (mean)"]
    assert diagnosis.prefix_cache.status == CacheHealth.AS_EXPECTED
    assert not diagnosis.decision.hard_failure


def test_the_suggested_reruns_are_commands_bench_accepts(runs, monkeypatch, capsys):
    commands = suggested_reruns(run_checklist(path, OPTIONS) for path in runs.values())
    assert len(commands) >= 3
    for command in commands:
        assert dry_run(command, monkeypatch, capsys)["requests"] > 0
