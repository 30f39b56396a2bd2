"""``run.json``'s typed ``workload`` (``runfmt.run_workload.WorkloadSection``) rebuilds the
spec it recorded: every family and preset of ``workloads/registry.py``, through JSON as
``run.json`` holds it, rebuilds the spec (a distribution to the ten digits its string
keeps: read back once, the spec is the same ever after) and the same plan, without the
files the spec named; the document holds the keys of the spec's flat form (``to_dict``,
the plan's), so the two cannot drift apart."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from runfmt.codec import decode, encode
from runfmt.run_workload import WorkloadSection
from workloads import registry
from workloads.build import build_plan
from workloads.errors import InputError
from workloads.spec import WorkloadSpec, load_spec

#: Load keys set away from their defaults, so that each is seen to come back.
LOAD = {"seed": 11, "num_requests": 6, "rate": 3.5, "arrival": "gamma", "cv": 2.0,
        "start_rate": 0.5, "prompt_format": "text"}  # fmt: skip


def _names() -> list[str]:
    files = [f"{kind}:/nowhere/{kind}.jsonl" for kind in registry.FILE_FAMILIES]
    plain = [n for n in registry.FAMILY_NAMES if n not in registry.FILE_FAMILIES]
    return [*plain, *registry.PRESET_FAMILIES, *files]


def _through_json(spec: WorkloadSpec) -> dict[str, object]:
    doc = json.loads(json.dumps(encode(WorkloadSection.of(spec))))
    assert doc == json.loads(json.dumps(spec.to_dict()))  # the keys, their order aside
    return doc


def _rebuilt(doc: dict[str, object]) -> WorkloadSpec:
    return decode(WorkloadSection, doc).spec()


@pytest.mark.parametrize("name", _names())
def test_every_family_and_preset_round_trips(name: str) -> None:
    spec = load_spec(name, LOAD)
    again = _rebuilt(_through_json(spec))
    assert again.to_dict() == spec.to_dict()
    assert _rebuilt(_through_json(again)) == again
    assert (again.name, again.family, again.load, again.seed, again.preset) == (
        spec.name, spec.family, spec.load, spec.seed, spec.preset
    )  # fmt: skip
    assert again.load.start_rate == 0.5 and again.prompt_format == "text"  # kept, not dropped


def test_a_spec_files_spec_rebuilds_without_the_file(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("workload: few-shot\nburstiness: 0.25\ntenants: [a, b]\nnum_requests: 8\n")
    spec = load_spec(str(path), {"concurrency": 2})
    path.unlink()  # the name is the file's, the values are in the dict
    again = _rebuilt(_through_json(spec))
    assert again.to_dict() == spec.to_dict() and math.isclose(again.load.cv or 0, 2.0)
    assert again.preset == "few-shot" and again.params.tenants == ("a", "b")
    rebuilt, planned = build_plan(again).requests, build_plan(spec).requests
    assert [(r.id, r.prompt_len, r.intended_s) for r in rebuilt] == [
        (r.id, r.prompt_len, r.intended_s) for r in planned
    ]


def test_an_infinite_rate_round_trips() -> None:
    spec = load_spec("random", {"rate": "inf", "num_requests": 4})
    assert _rebuilt(_through_json(spec)).load.rate == math.inf


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"family": "warp-drive"}, "family"),
        ({"params": {"groups": 2, "later_knob": 1}}, "later_knob"),
        ({"rate": -1}, "rate"),
        ({"workload": None}, "workload"),
    ],
)
def test_what_cannot_be_rebuilt_is_an_error_naming_the_key(change: dict, field: str) -> None:
    doc = _through_json(load_spec("shared-prefix")) | change
    with pytest.raises(InputError) as caught:
        _rebuilt(doc)
    assert caught.value.field == field


def test_a_ramp_is_recorded_only_when_it_is_not_linear() -> None:
    linear = load_spec("random", {"num_requests": 4, "start_rate": 1, "rate": 4})
    assert "ramp" not in _through_json(linear)
    stepped = load_spec(
        "random", {"num_requests": 4, "start_rate": 1, "rate": 4, "ramp": "exponential"}
    )
    doc = _through_json(stepped)
    assert doc["ramp"] == "exponential" and _rebuilt(doc).load.ramp == "exponential"
