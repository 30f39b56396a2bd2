"""WorkloadSpec: names, presets, spec files and flag overrides, layered and validated."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.build import build_plan
from workloads.distributions import Uniform
from workloads.errors import InputError
from workloads.spec import load_spec, parse_assignments


def test_preset_values_sit_under_overrides() -> None:
    spec = load_spec("doc-qa", {"groups": "4", "seed": 7, "rate": None})
    assert spec.family.name == "shared-prefix"
    assert spec.preset == "doc-qa"
    assert spec.params.groups == 4
    assert spec.params.zipf == 1.2  # from the preset
    assert spec.seed == 7
    assert spec.load.rate is None  # None overrides are ignored


def test_family_defaults_apply_without_a_preset() -> None:
    spec = load_spec("shared-prefix")
    assert spec.params.groups == 8 and spec.params.zipf == 0.0
    assert spec.preset is None and spec.seed == 0 and spec.prompt_format == "tokens"


def test_yaml_spec_file_is_layered_under_flags(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        "workload: few-shot\nseed: 3\nnum_requests: 50\narrival: gamma\nburstiness: 0.25\n"
        "prefix_len: uniform:500-600\ntenants: [alpha, beta]\n"
    )
    spec = load_spec(str(path), {"num_requests": "20"})
    assert spec.preset == "few-shot"
    assert spec.seed == 3
    assert spec.load.num_requests == 20
    assert spec.load.arrival == "gamma"
    assert spec.load.cv == pytest.approx(2.0)  # burstiness 0.25 is gamma shape 0.25
    assert spec.params.prefix_len == Uniform(500, 600)
    assert spec.params.tenants == ("alpha", "beta")
    assert spec.params.output_len.mean == 16  # from the preset
    plan = build_plan(spec)
    assert len(plan) == 20 and plan.arrival == "gamma"


def test_toml_spec_file_with_a_trace_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "prompt": [5, 6, 7], "output_length": 4}\n')
    path = tmp_path / "w.toml"
    path.write_text('workload = "trace:t.jsonl"\ntime_scale = 0.5\n')
    plan = build_plan(load_spec(str(path)))
    assert [list(r.prompt.token_ids(100)) for r in plan] == [[5, 6, 7]]
    assert plan.requests[0].max_tokens == 4


def test_resolved_spec_rebuilds_the_same_plan() -> None:
    spec = load_spec("system-prompt", {"seed": 5, "num_requests": 30, "tenants": 2})
    recorded = spec.to_dict()
    again = {
        k: v for k, v in recorded.items() if k not in ("workload", "family", "preset", "params")
    }
    again["duration"] = recorded["duration"]
    rebuilt = load_spec(str(recorded["workload"]), {**again, **recorded["params"]})
    assert build_plan(rebuilt).requests == build_plan(spec).requests


def test_unknown_workload_lists_the_known_ones() -> None:
    with pytest.raises(InputError) as info:
        load_spec("shared_prefix")
    message = str(info.value)
    assert message.startswith("workload: unknown workload 'shared_prefix'")
    for name in (
        "shared-prefix",
        "multi-turn",
        "long-prompt",
        "interference",
        "doc-qa",
        "trace:FILE",
    ):
        assert name in message


def test_unknown_key_in_a_spec_file_is_named_with_the_known_keys(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("workload: shared-prefix\nprefix_length: 100\n")
    with pytest.raises(InputError) as info:
        load_spec(str(path))
    assert info.value.field == "prefix_length"
    assert "prefix_len" in str(info.value) and "num_requests" in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"groups": "0"}, "groups"),
        ({"groups": "2.5"}, "groups"),
        ({"zipf": "-1"}, "zipf"),
        ({"rate": "0"}, "rate"),
        ({"num_requests": 0}, "num_requests"),
        ({"arrival": "bursty"}, "arrival"),
        ({"tenant_per": "session"}, "tenant_per"),
        ({"warmup": "maybe"}, "warmup"),
        ({"cv": 2, "burstiness": 0.25}, "burstiness"),
        ({"prefix_len": "uniform:9-3"}, "prefix_len"),
        ({"output_len": 0}, "output_len"),
        ({"prompt_format": "bytes"}, "prompt_format"),
    ],
)
def test_bad_values_are_input_errors_naming_the_key(overrides: dict, field: str) -> None:
    with pytest.raises(InputError) as info:
        load_spec("shared-prefix", overrides)
    assert info.value.field == field


def test_spec_file_problems(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_spec(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: [unclosed\n")
    with pytest.raises(InputError, match="cannot read spec file"):
        load_spec(str(bad))
    no_name = tmp_path / "noname.toml"
    no_name.write_text("seed = 1\n")
    with pytest.raises(InputError, match="'workload' key"):
        load_spec(str(no_name))


def test_closed_loop_and_rate_exclude_each_other() -> None:
    with pytest.raises(InputError) as info:
        build_plan(load_spec("shared-prefix", {"arrival": "closed", "concurrency": 4, "rate": 3}))
    assert info.value.field == "rate"
    with pytest.raises(InputError) as info:
        build_plan(load_spec("shared-prefix", {"concurrency": 4, "duration": 10}))
    assert info.value.field == "duration"


def test_assignments_from_the_command_line() -> None:
    assert parse_assignments(["groups=4", "prefix_len = uniform:1-2"]) == {
        "groups": "4",
        "prefix_len": "uniform:1-2",
    }
    with pytest.raises(InputError):
        parse_assignments(["groups"])
