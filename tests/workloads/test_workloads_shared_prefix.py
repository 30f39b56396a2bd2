"""shared-prefix plans: determinism, token-identical prefixes, Zipf skew, tenants, warm-up."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from workloads.build import build_plan
from workloads.plan import Plan
from workloads.shared_prefix import zipf_counts
from workloads.spec import load_spec

VOCAB = 32000


def _plan(**overrides: object) -> Plan:
    return build_plan(load_spec("shared-prefix", overrides))


def test_same_seed_same_plan_other_seed_other_plan() -> None:
    kwargs = {"prefix_len": "uniform:100-400", "suffix_len": "normal:mean=50,std=20"}
    a, b = _plan(seed=1, **kwargs), _plan(seed=1, **kwargs)
    assert a.requests == b.requests
    assert [r.prompt.token_ids(VOCAB).tolist() for r in a] == [
        r.prompt.token_ids(VOCAB).tolist() for r in b
    ]
    c = _plan(seed=2, **kwargs)
    assert [r.intended_s for r in a] != [r.intended_s for r in c]
    assert [len(r.prompt) for r in a] != [len(r.prompt) for r in c]
    assert not np.array_equal(
        a.requests[0].prompt.token_ids(VOCAB), c.requests[0].prompt.token_ids(VOCAB)
    )


def test_changing_the_arrival_keeps_the_prompts() -> None:
    poisson = _plan(seed=4, rate=2)
    gamma = _plan(seed=4, rate=9, arrival="gamma", cv=3)
    assert [r.prompt for r in poisson] == [r.prompt for r in gamma]
    assert [r.intended_s for r in poisson] != [r.intended_s for r in gamma]


def test_prefixes_are_identical_within_a_group_and_differ_across_groups() -> None:
    plan = _plan(groups=5, requests_per_group=6, prefix_len="uniform:200-300", suffix_len=40)
    lengths = plan.spec["group_prefix_tokens"]
    by_group: dict[int, list[np.ndarray]] = {}
    for r in plan:
        tokens = r.prompt.token_ids(VOCAB)
        assert len(tokens) == lengths[r.group] + 40
        by_group.setdefault(r.group, []).append(tokens)
    firsts = []
    for g, prompts in by_group.items():
        prefix = prompts[0][: lengths[g]]
        assert all(np.array_equal(p[: lengths[g]], prefix) for p in prompts)
        # Suffixes are each request's own.
        assert len({p[lengths[g] :].tobytes() for p in prompts}) == len(prompts)
        firsts.append(prefix[:16].tobytes())
    assert len(set(firsts)) == len(firsts)


def test_zipf_counts_follow_the_power_law_exactly() -> None:
    counts = zipf_counts(1000, 10, 1.0)
    assert counts.sum() == 1000
    harmonic = sum(1 / k for k in range(1, 11))
    for g, c in enumerate(counts):
        assert abs(c - 1000 / ((g + 1) * harmonic)) < 1
    assert zipf_counts(12, 4, 0.0).tolist() == [3, 3, 3, 3]


def test_plan_group_popularity_is_zipf_skewed_and_shuffled() -> None:
    plan = _plan(groups=8, num_requests=400, zipf=1.2)
    seen = Counter(r.group for r in plan)
    assert [seen[g] for g in range(8)] == zipf_counts(400, 8, 1.2).tolist()
    assert seen[0] > 5 * seen[7]
    order = [r.group for r in plan]
    assert order != sorted(order)


def test_tenants_per_group_and_loras_round_robin() -> None:
    plan = _plan(groups=4, requests_per_group=3, tenants=2, loras="a,b,c")
    for r in plan:
        assert r.tenant == f"tenant-{r.group % 2}"
        assert r.lora == "abc"[r.group % 3]
        assert r.scope("m").cache_salt == r.tenant and r.scope("m").lora == r.lora


def test_tenants_per_request_share_tokens_but_not_scope() -> None:
    plan = _plan(groups=1, requests_per_group=40, tenants="x,y,z", tenant_per="request")
    tenants = Counter(r.tenant for r in plan)
    assert set(tenants) == {"x", "y", "z"} and min(tenants.values()) > 5
    scopes = {r.scope("m").root_hash() for r in plan}
    assert len(scopes) == 3


def test_warmup_sends_each_prefix_once_first() -> None:
    plan = _plan(groups=3, requests_per_group=4, tenants=2, warmup=True, prefix_len=100)
    warm = [r for r in plan if r.warmup]
    assert list(plan.requests[: len(warm)]) == warm
    pairs = {(r.group, r.tenant) for r in plan.measured}
    assert {(r.group, r.tenant) for r in warm} == pairs and len(warm) == len(pairs)
    for w in warm:
        assert len(w.prompt) == 100 and w.intended_s is None and w.max_tokens == 1
    assert len(plan.measured) == 12


def test_open_loop_times_and_closed_loop_users() -> None:
    open_plan = _plan(num_requests=50, rate=10)
    times = [r.intended_s for r in open_plan]
    assert times[0] == 0.0 and times == sorted(times)
    assert open_plan.arrival == "poisson" and open_plan.concurrency is None
    closed = _plan(num_requests=50, concurrency=6)
    assert all(r.intended_s is None for r in closed)
    assert closed.arrival == "closed" and closed.concurrency == 6


def test_duration_sizes_the_plan() -> None:
    plan = _plan(duration=60, rate=5, arrival="constant")
    assert len(plan) == 300
    assert plan.requests[-1].intended_s == pytest.approx(59.8)


@pytest.mark.parametrize(
    ("preset", "groups", "requests"),
    [("system-prompt", 4, 200), ("few-shot", 16, 256), ("doc-qa", 32, 256)],
)
def test_presets_build_with_their_documented_shape(preset: str, groups: int, requests: int) -> None:
    plan = build_plan(load_spec(preset))
    assert len(plan) == requests
    assert len({r.group for r in plan}) == groups
    assert plan.spec["preset"] == preset
