"""Prefix-cache health: each verdict from runs of real plans, the oracle replayed offline."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from run_shapes import metric_row
from rundirs import plan_run

from diagnose.context import DiagnoseOptions, build_context
from diagnose.inputs import load_run_view
from diagnose.oracle_replay import replay_oracle
from diagnose.prefix_health import assess
from runfmt.diagnosis import CacheHealth
from runfmt.names import RUN_JSON
from runfmt.rundir import RunDir
from runfmt.runinfo import read_run_info
from runfmt.tables import RunTables

SHARED = {"num_requests": 40, "groups": 4, "prefix_len": 512, "suffix_len": 32, "output_len": 4}


def _config(t: float, blocks: int, caching: bool = True) -> dict:
    return metric_row(
        t,
        "vllm:cache_config_info",
        1.0,
        block_size="16",
        num_gpu_blocks=str(blocks),
        enable_prefix_caching=str(caching),
    )


def _judge(path):
    return assess(build_context(load_run_view(path), DiagnoseOptions()))


def _record_mapping(run: Path, path: Path) -> None:
    """The run as if measured with ``--mapping path``: vLLM's names plus the build's own
    eviction counter."""
    path.write_text(
        'flavour = "mybuild"\nextends = "vllm"\n\n'
        '[series.prefix_evictions]\nmetric = "mybuild_prefix_evictions_total"\n'
    )
    rundir = RunDir(run)
    info = read_run_info(rundir)
    metrics = replace(info.probes.server_metrics, mapping_file=str(path))
    rundir.write_json(
        RUN_JSON, replace(info, probes=replace(info.probes, server_metrics=metrics)).to_json()
    )


def _value(finding, name: str):
    return next(e.value for e in finding.evidence if e.name == name)


def test_replay_rebuilds_the_plan_and_reports_the_ideal_caches(tmp_path):
    view = load_run_view(plan_run(tmp_path / "r", "shared-prefix", SHARED))
    replay, why = replay_oracle(view)
    assert why is None and replay is not None and replay.requests == 40
    # 4 prefixes of 512 tokens (32 blocks): every request after a group's first hits them.
    assert replay.unbounded == replay.unscoped == 36 * 512
    assert replay.shared_blocks == 4 * 32


def test_as_expected_when_the_server_finds_what_the_oracle_expects(tmp_path):
    finding = _judge(plan_run(tmp_path / "r", "shared-prefix", SHARED))
    assert finding.status == CacheHealth.AS_EXPECTED
    assert _value(finding, "observed hit rate") == pytest.approx(
        _value(finding, "expected hit rate (oracle, this pool)")
    )
    assert any("evictions" in m for m in finding.missing)


def test_a_per_request_salt_is_an_identity_mismatch(tmp_path):
    salted = SHARED | {"tenants": 1000, "tenant_per": "request"}
    finding = _judge(plan_run(tmp_path / "r", "shared-prefix", salted))
    assert finding.status == CacheHealth.IDENTITY_MISMATCH
    assert "Per-request scopes" in finding.summary
    assert _value(finding, "unscoped hit rate (oracle)") > 60
    assert _value(finding, "unbounded-pool hit rate (oracle)") < 10
    assert "prefillscope bench" in finding.next and "tenant_per=request" not in finding.next


def test_hits_lost_without_evictions_are_an_identity_mismatch(tmp_path):
    samples = [metric_row(t, "prefillscope_engine_prefix_evictions_total", 0.0) for t in (0, 5)]
    run = plan_run(tmp_path / "r", "shared-prefix", SHARED, observed="zero", samples=samples)
    finding = _judge(run)
    assert finding.status == CacheHealth.IDENTITY_MISMATCH
    assert "block identity differs" in finding.summary


@pytest.mark.parametrize("evictions", [True, False])
def test_a_pool_smaller_than_the_working_set_thrashes(tmp_path, evictions):
    """With evictions: a vLLM build that counts them under a name of its own, read through
    the user's mapping (``--mapping``, recorded in run.json) as the canonical series."""
    thrash = SHARED | {"groups": 8}
    samples = [_config(t, 60) for t in (0.0, 5.0)]
    if evictions:
        samples += [
            metric_row(t, "mybuild_prefix_evictions_total", v)
            for t, v in ((0.0, 0.0), (5.0, 900.0))
        ]
    run = plan_run(
        tmp_path / "r", "shared-prefix", thrash, num_blocks=60, samples=samples, flavour="vllm"
    )
    if evictions:
        _record_mapping(run, tmp_path / "mybuild.toml")
    finding = _judge(run)
    assert finding.status == CacheHealth.THRASHING, finding.summary
    assert _value(finding, "KV pool") == 59  # vLLM reserves its null block
    assert _value(finding, "prefix working set") > 59
    assert ("900 cached blocks were evicted" in finding.summary) == evictions


def test_caching_off_and_unknown(tmp_path):
    samples = [_config(t, 1000, caching=False) for t in (0.0, 5.0)]
    off = plan_run(
        tmp_path / "off", "shared-prefix", SHARED, observed="zero", samples=samples, flavour="vllm"
    )
    finding = _judge(off)
    assert finding.status == CacheHealth.CACHING_OFF
    assert "enable_prefix_caching" in finding.summary and "allowed 85 %" in finding.summary
    unknown = _judge(plan_run(tmp_path / "unknown", "shared-prefix", SHARED, observed="none"))
    assert unknown.status == CacheHealth.UNKNOWN
    assert any("--enable-prompt-tokens-details" in m for m in unknown.missing)


def test_a_plan_that_cannot_be_rebuilt_is_named_missing(tmp_path):
    run = RunDir(plan_run(tmp_path / "r", "shared-prefix", SHARED))
    info = run.read_json("run.json")
    info["workload"]["prompt_format"] = "text"
    run.write_json("run.json", info)
    finding = _judge(run.path)
    assert any("text prompts" in m for m in finding.missing)
    assert finding.status == CacheHealth.AS_EXPECTED


def test_without_cached_tokens_the_server_counters_are_the_observation(tmp_path):
    made = plan_run(tmp_path / "made", "shared-prefix", SHARED)
    requests = RunTables(made).requests
    hits, queries = requests["expected_cached_tokens"].sum(), requests["prompt_tokens"].sum()
    samples = [
        metric_row(t, f"vllm:prefix_cache_{name}_total", value)
        for t, scale in ((0.0, 0.0), (5.0, 1.0))
        for name, value in (("hits", scale * hits), ("queries", scale * queries))
    ]
    run = plan_run(
        tmp_path / "r", "shared-prefix", SHARED, observed="none", samples=samples, flavour="vllm"
    )
    finding = _judge(run)
    assert finding.status == CacheHealth.AS_EXPECTED, finding.summary
    counted = next(e for e in finding.evidence if e.name == "server-counted hit rate")
    assert counted.value == pytest.approx(100 * hits / queries)
    assert "vllm:prefix_cache_hits_total" in counted.source
