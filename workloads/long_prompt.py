"""``long-prompt``: unique prompts of 2k to 32k+ tokens, where chunked prefill matters.

Every prompt is distinct (no prefix can be reused), so each one is prefilled in full:
the workload for time-to-first-token against prompt length, for the cost of later
chunks of a long prompt, and for what long prefills do to everyone else's decode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workloads.distributions import Distribution
from workloads.family import (
    Family,
    arrival_name,
    make_plan,
    resolve_arrival,
    schedule,
    unique_requests,
)
from workloads.params import dist, number
from workloads.plan import Plan

if TYPE_CHECKING:
    from workloads.spec import WorkloadSpec
    from workloads.tokenizer import Tokenizer


@dataclass(frozen=True)
class LongPromptParams:
    prompt_len: Distribution = field(**dist("uniform:2048-32768", 1, "prompt tokens per request"))
    output_len: Distribution = field(**dist(64, 1, "max_tokens per request"))
    requests: int = field(**number(32, 1, "requests when no count/duration is given"))


def build(spec: WorkloadSpec, tokenizer: Tokenizer | None = None) -> Plan:
    p: LongPromptParams = spec.params
    arrival = resolve_arrival(spec, FAMILY, arrival_name(spec))
    sched = schedule(spec, arrival, p.requests)
    requests = unique_requests(
        spec.seed, "long-prompt", p.prompt_len, p.output_len, sched.count, sched
    )
    return make_plan(spec, requests, arrival, sched.concurrency)


FAMILY = Family(
    name="long-prompt",
    summary="distinct prompts of 2k-32k+ tokens (no reuse): prefill cost and TTFT",
    params=LongPromptParams,
    build=build,
    default_rate=0.5,
)
