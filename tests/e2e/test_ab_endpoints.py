"""``diagnose ab --a URL --b URL``: two servers the user runs, and when not to believe them.

The two endpoints are embedded engines started here, differing in one planted way
besides the chunk size: prefix caching off in B (the hit rates cannot match), a short
``max_model_len`` in B (a share of its requests fail), or another vocabulary — another
model, whose greedy outputs differ. The first two must refuse the verdict and say why; the third has
matched conditions, and ``--check-outputs`` must find every output diverging.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ab_support import TIMING_TOLERANCES, ab_json, diagnose_ab

from perfmodel.config import EngineConfig
from runfmt.abresult import ABResult, Check
from simengine.embedded import EmbeddedServer

pytestmark = pytest.mark.slow

#: Two groups of requests sharing a 256-token prefix, suffixes of 16-400 tokens, 8
#: output tokens, sent over ~1.5 s (a shorter schedule makes the achieved rate jittery).
SHARED_PREFIX = [
    "--workload", "shared-prefix", "--num-requests", "16", "--rate", "10", "--seed", "5",
    "--set", "groups=2", "--set", "prefix_len=256", "--set", "suffix_len=uniform:16-400",
    "--set", "output_len=8", "--gpu-telemetry", "off", "--metrics-interval", "0.1",
    "--vocab-size", "32000",
    "--resamples", "400", *TIMING_TOLERANCES,
]  # fmt: skip


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, str]]:
    """URLs of engines with budgets 512 and 2048, and of the planted variants."""
    configs = {
        "a": EngineConfig(max_num_batched_tokens=512),
        "b": EngineConfig(max_num_batched_tokens=2048),
        "b_no_cache": EngineConfig(max_num_batched_tokens=2048, enable_prefix_caching=False),
        "b_short": EngineConfig(max_num_batched_tokens=2048, max_model_len=512),
        "b_model": EngineConfig(max_num_batched_tokens=2048, vocab_size=40000),
    }
    servers = {name: EmbeddedServer(config) for name, config in configs.items()}
    for server in servers.values():
        server.start()
    try:
        yield {name: server.url for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()


def endpoints_ab(engines: dict[str, str], b: str, out: Path, *extra: str) -> tuple[int, ABResult]:
    args = ["--chunks", "512,2048", "--a", engines["a"], "--b", engines[b], *SHARED_PREFIX]
    return ab_json(*args, *extra, "--out", out)


def check(doc: ABResult, name: str) -> Check:
    assert doc.conditions is not None
    return next(c for c in doc.conditions.checks if c.name == name)


def test_arms_whose_hit_rates_differ_get_no_verdict(engines, tmp_path: Path):
    code, doc = endpoints_ab(engines, "b_no_cache", tmp_path / "ab")
    assert code == 1 and doc.out == str(tmp_path / "ab")  # --json names its folder
    verdict = doc.verdict
    assert verdict is not None and verdict.winner is None and verdict.refused
    assert verdict.sentence.startswith("no verdict: the arms' conditions did not match")
    hit = check(doc, "hit_rate")
    assert hit.matched is False and "hit_rate" in verdict.sentence
    assert min(hit.values["512"]) > 0.3 and max(hit.values["2048"]) == 0.0
    assert doc.mode == "endpoints" and [a.target for a in doc.arms] == [
        engines["a"],
        engines["b_no_cache"],
    ]
    assert doc.comparisons  # the measurements are still shown, only not judged


def test_a_planted_error_rate_refuses_the_verdict(engines, tmp_path: Path):
    # --allow-overlong: B's 512-token context would otherwise refuse the run up front
    code, doc = endpoints_ab(engines, "b_short", tmp_path / "ab", "--allow-overlong")
    verdict = doc.verdict
    assert code == 1 and verdict is not None and verdict.refused and verdict.winner is None
    errors = check(doc, "errors")
    assert errors.matched is False
    assert all(n == 0 for n in errors.values["512"])
    assert all(n > 0 for n in errors.values["2048"])
    assert "errors:" in verdict.sentence


def test_outputs_that_differ_are_found(engines, tmp_path: Path):
    _, doc = endpoints_ab(engines, "b_model", tmp_path / "ab", "--check-outputs")
    outputs = doc.outputs
    assert outputs is not None and outputs.baseline is not None
    arm = outputs.arms[0]
    assert arm.compared == 3 * 16 and (arm.exact_match_rate or 0) < 0.2
    assert arm.first_divergence["count"] == arm.compared - arm.exact_matches
    assert arm.status in ("near ties", "differs") and arm.consistent is False
    assert outputs.consistent is False
    assert outputs.baseline.exact_match_rate == 1.0  # A's own trials agree


def test_endpoint_flags_are_checked_before_anything_runs(engines, tmp_path: Path):
    cases = [
        (["--a", engines["a"]], "--b: is missing"),
        (["--a", engines["a"], "--b", engines["b"], "--launch", "x {chunk} {port}"], "--launch"),
        (["--a", engines["a"], "--b", engines["b"], "--engine", "gpu=l40s"], "--engine"),
    ]
    for extra, message in cases:
        code, _, err = diagnose_ab("--chunks", "512,2048", *SHARED_PREFIX, *extra)
        assert code == 2 and message in err and err.count("\n") == 1, err
    code, _, err = diagnose_ab(
        "--chunks", "512,1024,2048", "--a", engines["a"], "--b", engines["b"], *SHARED_PREFIX
    )
    assert code == 2 and "exactly two chunk sizes" in err
    code, _, err = diagnose_ab(
        "--chunks", "512,2048", "--a", "http://127.0.0.1:9", "--b", engines["b"], *SHARED_PREFIX,
        "--out", tmp_path / "unreachable",
    )  # fmt: skip
    assert code == 2 and err.startswith("prefillscope: error: --a:"), err
