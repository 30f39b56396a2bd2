"""The pieces of ``bench`` that need no server: engine flags, naming, sizing."""

from __future__ import annotations

import pytest

from prefillscope.engine_flags import parse_engine_flags
from session.bench_plan import (
    CLOSED_LOOP_MIN_PLAN,
    resolve_workload,
    target_rate,
    warmup_requests,
)
from session.bench_runner import default_out
from workloads.build import build_plan
from workloads.errors import InputError


def test_engine_flags_are_typed_by_the_config() -> None:
    settings = parse_engine_flags(
        [
            "max_num_batched_tokens=4096",
            "gpu=l40s",
            "num_gpu_blocks=2000",
            "host_overhead_per_seq_s=0.0002",
            "enable-prefix-caching=false",
            "fixed_step_s=none",
            "stream_interval=4",
        ]
    )
    config = settings.config
    assert config.max_num_batched_tokens == 4096 and config.gpu == "l40s"
    assert config.num_gpu_blocks == 2000 and config.host_overhead_per_seq_s == 0.0002
    assert config.enable_prefix_caching is False and config.fixed_step_s is None
    assert settings.stream_interval == 4
    assert settings.describe()["stream_interval"] == 4
    assert settings.disagg is None and "disaggregate" not in settings.describe()


def test_engine_flags_give_bench_a_disaggregated_engine() -> None:
    settings = parse_engine_flags(["disaggregate=2:1", "kv_link_gbps=25", "kv_transfer=overlap"])
    disagg = settings.disagg
    assert (disagg.prefill_workers, disagg.decode_workers, disagg.transfer) == (2, 1, "overlap")
    assert disagg.link.gbps == 25.0
    assert settings.describe()["disaggregate"]["ratio"] == "2:1"
    with pytest.raises(InputError, match="kv_transfer: unknown mode"):
        parse_engine_flags(["disaggregate=1:1", "kv_transfer=sometimes"])


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("gpu", "expected KEY=VALUE"),
        ("num_gpus=2", "unknown engine setting 'num_gpus'"),
        ("max_num_seqs=many", "not a whole number"),
        ("enable_prefix_caching=maybe", "not true or false"),
        ("stream_interval=0", "must be >= 1"),
        ("gpu=tpu-v9", "unknown GPU"),
        ("max_num_batched_tokens=64", "max_num_batched_tokens: 64 is below max_num_seqs"),
        ("fixed_step_s=-1", "fixed_step_s: -1 is too small"),
        ("kv_link_gbps=5", "kv_link_gbps needs disaggregate=P:D"),
        ("disaggregate=0:1", "disaggregate: '0:1' is not P:D"),
    ],
)
def test_bad_engine_flags_name_the_setting(item: str, says: str) -> None:
    with pytest.raises(InputError) as info:
        parse_engine_flags([item])
    assert info.value.field == "--engine" and says in str(info.value)
    assert "\n" not in str(info.value)


def test_default_run_directories_are_named_for_time_and_workload() -> None:
    assert str(default_out("doc-qa", now=0)) == "runs/19700101T000000Z-doc-qa"
    assert default_out("trace:/data/mooncake_trace.jsonl", now=0).name.endswith("-mooncake_trace")
    assert default_out("specs/my spec.yaml", now=0).name.endswith("-my-spec")


def test_users_for_a_duration_get_a_generous_plan_and_a_deadline() -> None:
    spec, deadline = resolve_workload("shared-prefix", {"concurrency": 8, "duration": 60})
    assert deadline == 60.0 and spec.load.num_requests == 8 * 60 * 50
    spec, deadline = resolve_workload("shared-prefix", {"concurrency": 1, "duration": 1})
    assert spec.load.num_requests == CLOSED_LOOP_MIN_PLAN
    spec, deadline = resolve_workload("shared-prefix", {"rate": 5, "duration": 10})
    assert deadline is None and spec.load.num_requests is None  # open loop: the schedule ends it
    spec, _ = resolve_workload("system-prompt", {}, api="chat")
    assert spec.prompt_format == "text"


def test_warmup_requests_share_nothing_with_the_plan() -> None:
    spec, _ = resolve_workload("system-prompt", {"num_requests": 20, "rate": 10})
    plan = build_plan(spec)
    warm = warmup_requests(plan, 3)
    assert [w.id for w in warm] == [f"bench-warmup-000{i}" for i in range(3)]
    assert all(w.warmup and w.intended_s is None for w in warm)
    assert [w.prompt_len for w in warm] == [r.prompt_len for r in plan.requests[:3]]
    measured = {s.key for r in plan.requests for s in r.prompt.segments}
    assert not measured & {s.key for w in warm for s in w.prompt.segments}
    assert target_rate(plan) == pytest.approx(10, rel=0.5)
