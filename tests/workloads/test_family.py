"""``workloads.family``: the load settings every family resolves the same way, and the
two single-purpose families built on it (``long-prompt``, ``interference``)."""

from __future__ import annotations

import pytest

from workloads.distributions import parse_distribution
from workloads.errors import InputError
from workloads.family import arrival_name, round_robin, unique_requests
from workloads.interference import DEFAULT_STREAMS
from workloads.interference import build as build_interference
from workloads.long_prompt import build as build_long_prompt
from workloads.spec import load_spec


def test_the_arrival_is_implied_by_what_is_given():
    assert arrival_name(load_spec("long-prompt")) == "poisson"
    assert arrival_name(load_spec("long-prompt", {"concurrency": 4})) == "closed"
    assert arrival_name(load_spec("long-prompt", {"concurrency": 4, "rate": 1})) == "poisson"
    assert arrival_name(load_spec("long-prompt", {"arrival": "constant"})) == "constant"


def test_a_closed_loop_with_a_rate_is_refused_naming_rate():
    spec = load_spec("long-prompt", {"arrival": "closed", "concurrency": 2, "rate": 1})
    with pytest.raises(InputError) as err:
        build_long_prompt(spec)
    assert err.value.field == "rate"


def test_round_robin_cycles_and_none_without_names():
    assert [round_robin(("a", "b"), i) for i in range(5)] == ["a", "b", "a", "b", "a"]
    assert round_robin((), 3) is None


def test_unique_requests_share_no_seed_key_and_are_reproducible():
    one = parse_distribution(10, "x")
    first = unique_requests(7, "k", one, one, 50)
    again = unique_requests(7, "k", one, one, 50)
    keys = {r.prompt.segments[0].key for r in first}
    assert len(keys) == 50
    assert first == again
    assert first[3].id == "k-000003" and first[3].prompt_len == 10 and first[3].max_tokens == 10
    assert {r.prompt.segments[0].key for r in unique_requests(8, "k", one, one, 50)} != keys


def test_long_prompt_count_defaults_to_its_requests_knob_and_honours_num_requests():
    plan = build_long_prompt(load_spec("long-prompt", {"requests": 5, "prompt_len": 4096}))
    assert len(plan) == 5 and {r.prompt_len for r in plan} == {4096}
    assert plan.arrival == "poisson"
    assert len(build_long_prompt(load_spec("long-prompt", {"num_requests": 3}))) == 3
    times = [r.intended_s for r in plan]
    assert times == sorted(times)


def test_interference_streams_are_closed_loop_decodes_plus_open_loop_long_prompts():
    spec = load_spec(
        "interference", {"concurrency": 3, "stream_requests": 2, "num_requests": 4, "rate": 1}
    )
    plan = build_interference(spec)
    kinds = [r.kind for r in plan]
    assert kinds.count("decode") == 3 * 2 and kinds.count("long-prompt") == 4
    assert plan.concurrency == 3 and plan.spec["decode_streams"] == 3
    assert all(r.intended_s is None for r in plan if r.kind == "decode")
    assert all(r.intended_s is not None for r in plan if r.kind == "long-prompt")


def test_interference_defaults_its_streams_and_refuses_a_closed_arrival():
    plan = build_interference(load_spec("interference", {"long_prompts": 1}))
    assert plan.spec["decode_streams"] == DEFAULT_STREAMS
    with pytest.raises(InputError) as err:
        build_interference(load_spec("interference", {"arrival": "closed", "concurrency": 2}))
    assert err.value.field == "arrival"
