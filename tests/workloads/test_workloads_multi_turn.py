"""multi-turn sessions: plan shape, the history composition, and online annotation."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from workloads.build import build_plan
from workloads.multi_turn import assumed_prompts, next_prompt
from workloads.oracle import PrefixOracle, annotate
from workloads.plan import Plan, Prompt, RequestSpec, Segment
from workloads.spec import load_spec

VOCAB = 32000


def _plan(**overrides: object) -> Plan:
    return build_plan(load_spec("multi-turn", overrides))


def test_sessions_turns_and_what_releases_them() -> None:
    plan = _plan(num_requests=10, turns=4, rate=2)
    assert len(plan) == 10
    sessions: dict[int, list[RequestSpec]] = defaultdict(list)
    for r in plan:
        sessions[r.session].append(r)
    assert sorted(len(s) for s in sessions.values()) == [2, 4, 4]  # the last one cut short
    for turns in sessions.values():
        assert [r.turn for r in turns] == list(range(len(turns)))  # in order within the plan
        first, *later = turns
        assert first.intended_s is not None and first.think_time_s == 0.0
        for r in later:
            assert r.intended_s is None and r.think_time_s >= 0.0
            assert len(r.prompt) == 96  # only the new user message
    assert len({r.think_time_s for r in plan if r.turn}) == 7


def test_closed_loop_sessions() -> None:
    plan = _plan(num_requests=8, turns=2, concurrency=3)
    assert plan.concurrency == 3
    assert all(r.intended_s is None for r in plan)


def test_system_prompt_is_shared_per_tenant() -> None:
    plan = _plan(num_requests=16, turns=2, tenants=2, system_len=64)
    firsts = [r for r in plan if r.turn == 0]
    system = {r.tenant: set() for r in firsts}
    for r in firsts:
        system[r.tenant].add(r.prompt.token_ids(VOCAB)[:64].tobytes())
    assert set(system) == {"tenant-0", "tenant-1"}
    assert all(len(v) == 1 for v in system.values())
    assert system["tenant-0"] != system["tenant-1"]


def test_next_prompt_is_history_plus_returned_plus_new() -> None:
    plan = _plan(num_requests=2, turns=2)
    first, second = sorted(plan.requests, key=lambda r: r.turn)
    returned = [11, 12, 13, 14, 15]
    full = next_prompt(first.prompt, returned, second)
    tokens = full.token_ids(VOCAB)
    n = len(first.prompt)
    assert np.array_equal(tokens[:n], first.prompt.token_ids(VOCAB))
    assert tokens[n : n + 5].tolist() == returned
    assert np.array_equal(tokens[n + 5 :], second.prompt.token_ids(VOCAB))
    assert len(full) == n + 5 + len(second.prompt)


def test_assumed_prompts_grow_by_each_full_answer() -> None:
    plan = _plan(num_requests=3, turns=3, output_len=50, user_len=20, first_len=30, system_len=10)
    full = assumed_prompts(plan)
    lengths = [len(full[r.id]) for r in sorted(plan.requests, key=lambda r: r.turn)]
    assert lengths == [40, 40 + 50 + 20, 40 + 50 + 20 + 50 + 20]


def test_later_turns_are_left_to_the_run_and_expect_what_was_returned() -> None:
    plan = _plan(num_requests=2, turns=2, system_len=0, first_len=100, user_len=30)
    plan = annotate(plan, block_size=16, num_blocks=None, vocab_size=VOCAB)
    first, second = sorted(plan.requests, key=lambda r: r.turn)
    assert first.expected_cached_tokens == 0
    assert second.expected_cached_tokens is None

    oracle = PrefixOracle(16)
    returned = list(range(500, 537))  # what the server answered: 37 tokens
    scope = first.scope()
    assert oracle.expect(first.prompt, scope) == 0
    # The last returned token never enters the KV cache.
    oracle.record(first.prompt.extended(Segment(36, tokens=tuple(returned[:-1]))), scope)
    full = next_prompt(first.prompt, returned, second)
    # 100 + 36 = 136 cached tokens → 8 full blocks of 16.
    assert oracle.expect(full, scope) == 128
    assert oracle.expect(full.token_ids(VOCAB), scope) == 128


def test_next_prompt_keeps_the_previous_segments() -> None:
    prev = Prompt((Segment(10, key=1),))
    spec = RequestSpec(id="x", prompt=Prompt((Segment(3, key=2),)), max_tokens=1)
    assert next_prompt(prev, [], spec).segments == (Segment(10, key=1), Segment(3, key=2))
