"""``shared-prefix``: groups of requests that open with the same tokens.

The traffic prefix caching exists for: a system prompt in front of every chat turn,
few-shot examples in front of every query, a document in front of every question about
it. Each group has one prefix (its length drawn once per group), each request adds its
own suffix. Group popularity follows Zipf's law — group ``g`` gets a share proportional
to ``1/(g+1)^zipf`` of the requests, allotted exactly (largest remainder) and then
shuffled — so hot and cold prefixes compete for the cache as in production.

Tenants are ``cache_salt`` values: a salted request can only hit blocks cached under
the same salt. With ``tenant_per=group`` each group belongs to one tenant; with
``tenant_per=request`` every request draws a tenant, so one prefix is cached once per
tenant — the cost of isolation, and what a per-request salt does to a cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from workloads.distributions import Distribution
from workloads.family import Family, arrival_name, make_plan, resolve_arrival, round_robin, schedule
from workloads.params import Names, choice, dist, names, number, option
from workloads.plan import Plan, Prompt, RequestSpec, Segment
from workloads.seeding import derive_key, rng

if TYPE_CHECKING:
    from workloads.spec import WorkloadSpec
    from workloads.tokenizer import Tokenizer


@dataclass(frozen=True)
class SharedPrefixParams:
    groups: int = field(**number(8, 1, "distinct shared prefixes"))
    requests_per_group: int = field(
        **number(16, 1, "requests per group when no count/duration is given")
    )
    prefix_len: Distribution = field(
        **dist(1024, 0, "tokens of a group's shared prefix, drawn per group")
    )
    suffix_len: Distribution = field(**dist(128, 0, "unique tokens after the prefix, per request"))
    output_len: Distribution = field(**dist(128, 1, "max_tokens of each request"))
    zipf: float = field(
        **number(0.0, 0, "popularity exponent: group g gets a share ∝ 1/(g+1)^zipf", maximum=100)
    )
    tenants: Names = field(**names("tenant-", "cache_salt values (a count or a list)"))
    tenant_per: str = field(
        **choice("group", ("group", "request"), "a tenant per group or per request")
    )
    loras: Names = field(**names("lora-", "LoRA adapter names, given to groups round-robin"))
    warmup: bool = field(**option(False, "send each group's prefix once first (not measured)"))


PRESETS: dict[str, dict[str, object]] = {
    # A few long system prompts in front of many short chat turns.
    "system-prompt": {
        "groups": 4,
        "requests_per_group": 50,
        "prefix_len": 1536,
        "suffix_len": "lognormal:mean=192,std=128,max=2048",
        "output_len": 128,
        "zipf": 1.0,
    },
    # Instructions and worked examples per task, a short query, a very short answer.
    "few-shot": {
        "groups": 16,
        "requests_per_group": 16,
        "prefix_len": "uniform:1024-3072",
        "suffix_len": "uniform:32-128",
        "output_len": 16,
        "zipf": 0.8,
    },
    # Long documents, hot ones asked about more, a one-line question, a paragraph back.
    "doc-qa": {
        "groups": 32,
        "requests_per_group": 8,
        "prefix_len": "lognormal:mean=6000,std=3000,max=24000",
        "suffix_len": "uniform:16-64",
        "output_len": 192,
        "zipf": 1.2,
    },
}


def zipf_counts(total: int, groups: int, exponent: float) -> np.ndarray:
    """``total`` requests shared among ``groups`` in proportion to ``1/(g+1)^exponent``.

    Exact apportionment (largest remainder, ties to the more popular group) rather than
    sampling, so the skew a plan promises is the skew it has.
    """
    weights = 1.0 / np.arange(1, groups + 1, dtype=float) ** exponent
    quota = total * weights / weights.sum()
    counts = np.floor(quota).astype(np.int64)
    short = total - int(counts.sum())
    order = np.argsort(-(quota - counts), kind="stable")
    counts[order[:short]] += 1
    return counts


def _tenants(p: SharedPrefixParams, seed: int, groups: np.ndarray) -> list[str | None]:
    if not p.tenants:
        return [None] * len(groups)
    if p.tenant_per == "group":
        return [round_robin(p.tenants, int(g)) for g in groups]
    picks = rng(seed, "shared-prefix", "tenants").integers(len(p.tenants), size=len(groups))
    return [p.tenants[int(i)] for i in picks]


def _warmups(
    prefixes: list[Segment], users: Iterable[tuple[int, str | None, str | None]]
) -> list[RequestSpec]:
    """One prefix-only request per (group, tenant, adapter) that measured requests use."""
    distinct = dict.fromkeys(u for u in users if prefixes[u[0]].length)
    return [
        RequestSpec(
            id=f"warmup-{i:04d}",
            prompt=Prompt((prefixes[g],)),
            max_tokens=1,
            kind="warmup",
            group=g,
            tenant=tenant,
            lora=lora,
            warmup=True,
        )
        for i, (g, tenant, lora) in enumerate(distinct)
    ]


def build(spec: WorkloadSpec, tokenizer: Tokenizer | None = None) -> Plan:
    p: SharedPrefixParams = spec.params
    seed = spec.seed
    arrival = resolve_arrival(spec, FAMILY, arrival_name(spec))
    sched = schedule(spec, arrival, p.groups * p.requests_per_group)
    counts = zipf_counts(sched.count, p.groups, p.zipf)
    groups = rng(seed, "shared-prefix", "order").permutation(np.repeat(np.arange(p.groups), counts))
    prefix_lens = p.prefix_len.sample_int(rng(seed, "lengths", "prefix"), p.groups)
    suffix_lens = p.suffix_len.sample_int(rng(seed, "lengths", "suffix"), sched.count)
    outputs = p.output_len.sample_int(rng(seed, "lengths", "output"), sched.count)
    prefixes = [
        Segment(int(n), key=derive_key(seed, "prefix", g)) for g, n in enumerate(prefix_lens)
    ]
    tenants = _tenants(p, seed, groups)

    def measured() -> Iterator[RequestSpec]:  # one at a time: the plan packs them
        for i, g in enumerate(groups):
            yield RequestSpec(
                id=f"req-{i:06d}",
                prompt=Prompt(()).extended(
                    prefixes[g], Segment(int(suffix_lens[i]), key=derive_key(seed, "suffix", i))
                ),
                max_tokens=int(outputs[i]),
                intended_s=sched.at(i),
                kind="shared-prefix",
                group=int(g),
                tenant=tenants[i],
                lora=round_robin(p.loras, int(g)),
            )

    users = ((int(g), tenants[i], round_robin(p.loras, int(g))) for i, g in enumerate(groups))
    warmups = _warmups(prefixes, users) if p.warmup else []
    return make_plan(
        spec,
        chain(warmups, measured()),
        arrival,
        sched.concurrency,
        group_requests=counts.tolist(),
        group_prefix_tokens=prefix_lens.tolist(),
    )


FAMILY = Family(
    name="shared-prefix",
    summary="groups of requests sharing a prefix; Zipf popularity, tenants, LoRA",
    params=SharedPrefixParams,
    build=build,
    presets=PRESETS,
    default_rate=4.0,
)
