"""A plan's requests held by column (``workloads.packed``): read back equal, field by
field and type by type, to what each family gave; views, the oracle's column, pickling;
values a typed column cannot hold kept as given; the oracle's memo bounded."""

from __future__ import annotations

import pickle
from dataclasses import fields, replace
from types import SimpleNamespace

import numpy as np
import pytest
from repo_paths import FIXTURES

from workloads import oracle as oracle_module
from workloads.build import build_plan
from workloads.oracle import PromptHasher, annotate, plan_order_expectations
from workloads.plan import PackedRequests, Plan, Prompt, RequestSpec, Segment
from workloads.prefix import CacheScope, block_hashes
from workloads.spec import load_spec

TRACE = FIXTURES / "traces" / "mooncake_conversation_trace.jsonl"
WORKLOADS = {
    "shared-prefix": {
        "num_requests": 60,
        "groups": 4,
        "tenants": 3,
        "tenant_per": "request",
        "loras": 2,
        "warmup": True,
        "arrival": "poisson",
        "rate": 5,
    },
    "closed-loop": {"num_requests": 30, "arrival": "closed", "concurrency": 3},
    "multi-turn": {"sessions": 6, "turns": 3, "tenants": 2},
    "long-prompt": {"num_requests": 8, "prompt_len": 4096},
    "interference": {"long_prompts": 4},
    "random": {"num_requests": 20, "input_len": 50, "prefix_len": 8},
    f"trace:{TRACE}": {"num_requests": 40},
}


def _same(read: object, given: object) -> None:
    """Equal, and every field (and every prompt segment's) of the same type."""
    assert read == given
    if type(given) is not RequestSpec:
        assert read is given
        return
    for f in fields(RequestSpec):
        assert type(getattr(read, f.name)) is type(getattr(given, f.name)), f.name
    for a, b in zip(read.prompt.segments, given.prompt.segments, strict=True):  # type: ignore[attr-defined]
        assert (type(a.length), type(a.key), type(a.tokens)) == (
            type(b.length),
            type(b.key),
            type(b.tokens),
        )


@pytest.fixture
def packed_from(monkeypatch: pytest.MonkeyPatch) -> dict[int, list[RequestSpec]]:
    """What each ``PackedRequests.pack`` was given, by the id of what it returned."""
    given: dict[int, list[RequestSpec]] = {}
    pack = PackedRequests.pack.__func__  # type: ignore[attr-defined]

    def recording(cls: type[PackedRequests], requests):  # type: ignore[no-untyped-def]
        items = list(requests)
        packed = pack(cls, items)
        given[id(packed)] = items
        return packed

    monkeypatch.setattr(PackedRequests, "pack", classmethod(recording))
    return given


@pytest.mark.parametrize("workload", list(WORKLOADS), ids=lambda w: w.split(":")[0])
def test_every_family_reads_back_what_it_built(
    workload: str, packed_from: dict[int, list[RequestSpec]]
) -> None:
    name = "shared-prefix" if workload == "closed-loop" else workload
    plan = build_plan(load_spec(name, {"seed": 5, **WORKLOADS[workload]}))
    given = packed_from[id(plan.requests)]
    assert len(plan) == len(given) > 0
    for read, built in zip(plan.requests, given, strict=True):
        _same(read, built)
    for i in (0, len(given) // 2, -1):
        _same(plan.requests[i], given[i])
    assert plan.requests[2:7] == given[2:7]
    assert list(plan.measured) == [r for r in given if not r.warmup]
    assert plan.requests.column("id") == [r.id for r in given]
    copied = pickle.loads(pickle.dumps(plan))
    assert copied == plan and copied.requests == given


def test_values_a_typed_column_cannot_hold_are_kept_as_given() -> None:
    stranger = SimpleNamespace(id="d", warmup=False, intended_s=None, session=None, turn=None)
    given: list = [
        RequestSpec("a\udcff", Prompt((Segment(3, key=(1 << 64) + 5),)), np.int64(4)),  # type: ignore[arg-type]
        RequestSpec("b", Prompt.of_tokens([1, 2]), True, intended_s=np.float64(0.5), group=2),
        RequestSpec(
            "c",
            Prompt((Segment(2, key=7), Segment(1, tokens=(9,)))),
            3,
            intended_s=-0.0,
            session=0,
            turn=1,
            text="x",
            messages=({"role": "user", "content": "x"},),
            warmup=True,
            carries_history=True,
            think_time_s=1.5,
            expected_cached_tokens=-(1 << 63),
        ),
        stranger,
        RequestSpec("é", Prompt(()), 1, tenant="t", lora="l", kind="k"),
    ]
    packed = PackedRequests.pack(iter(given))
    for read, built in zip(packed, given, strict=True):
        _same(read, built)
    assert str(packed[2].intended_s) == "-0.0"
    assert packed.column("warmup") == [False, False, True, False, False]
    assert packed.field(3, "id") == "d" and packed.select([4, 0]) == [given[4], given[0]]


def test_the_oracle_annotates_a_column_and_shares_the_rest() -> None:
    plan = build_plan(load_spec("shared-prefix", {"seed": 2, **WORKLOADS["shared-prefix"]}))
    expected = plan_order_expectations(plan, 16, 40, 32000)
    annotated = annotate(plan, 16, 40, 32000)
    assert annotated.requests == [
        replace(r, expected_cached_tokens=e) for r, e in zip(plan.requests, expected, strict=True)
    ]
    assert any(expected) and all(r.expected_cached_tokens is None for r in plan.requests)
    before, after = plan.requests._store.columns, annotated.requests._store.columns
    assert [name for name, column in after.items() if column is not before[name]] == [
        "expected_cached_tokens"
    ]


def test_a_plan_built_from_a_generator_never_holds_the_whole_list() -> None:
    made: list[int] = []

    def requests():
        for i in range(1000):
            made.append(i)
            yield RequestSpec(f"r{i}", Prompt((Segment(8, key=i),)), 4)

    plan = Plan("test", 0, requests())
    assert made == list(range(1000)) and len(plan) == 1000
    assert isinstance(plan.requests, PackedRequests)
    assert plan.requests[999] == RequestSpec("r999", Prompt((Segment(8, key=999),)), 4)


def test_the_memo_in_two_generations_gives_the_plain_hashes_and_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(oracle_module, "MEMO_GENERATION", 8)
    plan = build_plan(load_spec("shared-prefix", {"seed": 1, "num_requests": 80, "groups": 3}))
    hasher = PromptHasher(16, 32000)
    scope = CacheScope(model="m")
    for r in plan.requests:
        plain = block_hashes(r.prompt.token_ids(32000), 16, scope)
        assert hasher.chain(r.prompt, scope) == plain
        assert len(hasher._memo) <= 8 and len(hasher._old) <= 8
    again = PromptHasher(16, 32000)  # an unbounded one agrees: dropping changes no hash
    monkeypatch.setattr(oracle_module, "MEMO_GENERATION", 1 << 30)
    assert [again.chain(r.prompt, scope) for r in plan.requests] == [
        hasher.chain(r.prompt, scope) for r in plan.requests
    ]


def test_a_column_of_one_value_tells_equal_values_apart() -> None:
    prompt = Prompt((Segment(1, key=1),))
    given = [
        RequestSpec("a", prompt, 1, think_time_s=0.0, intended_s=None),
        RequestSpec("b", prompt, True, think_time_s=-0.0, intended_s=None),  # type: ignore[arg-type]
        RequestSpec("c", prompt, 1, think_time_s=0.0, intended_s=2.0),
    ]
    packed = PackedRequests.pack(given)
    for read, built in zip(packed, given, strict=True):
        _same(read, built)
    assert [str(t) for t in packed.column("think_time_s")] == ["0.0", "-0.0", "0.0"]
    same = PackedRequests.pack([given[0]] * 500)
    assert same.column("prompt") == [prompt] * 500 and same[499].think_time_s == 0.0
