"""``multi-turn``: chat sessions whose history is what the server really said.

Turn 0 of a session is a (tenant's) system prompt plus a first user message, sent at
the session's arrival time (or by a closed-loop user). Every later turn is sent
``think_time_s`` after the previous turn finished, and its prompt is the previous
turn's full prompt, then the tokens the server *returned*, then the new user message.
The history cannot be known before the run, so a later turn's ``RequestSpec.prompt``
holds only the new user tokens and the load generator composes the rest with
``next_prompt``; the session's prefix oracle replays those turns from what was recorded.

For statistics before a run (``bench --dry-run``) ``assumed_prompts`` composes every
turn as if each answer were ``max_tokens`` tokens long.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from workloads.distributions import Distribution
from workloads.family import Family, arrival_name, make_plan, resolve_arrival, round_robin, schedule
from workloads.limits import MAX_SECONDS
from workloads.params import Names, dist, names, number
from workloads.plan import Plan, Prompt, RequestSpec, Segment
from workloads.seeding import derive_key, rng

if TYPE_CHECKING:
    from workloads.spec import WorkloadSpec
    from workloads.tokenizer import Tokenizer


@dataclass(frozen=True)
class MultiTurnParams:
    turns: int = field(**number(4, 1, "turns per session"))
    sessions: int = field(**number(16, 1, "sessions when no count/duration is given"))
    system_len: Distribution = field(**dist(256, 0, "system prompt tokens, one per tenant, shared"))
    first_len: Distribution = field(**dist(384, 1, "tokens of a session's first user message"))
    user_len: Distribution = field(**dist(96, 1, "tokens of each later user message"))
    output_len: Distribution = field(**dist(192, 1, "max_tokens of each turn"))
    think_time: Distribution = field(
        **dist(
            "exponential:mean=3",
            0,
            "seconds from an answer to the next turn",
            maximum=MAX_SECONDS,
            whole=False,
        )
    )
    tenants: Names = field(**names("tenant-", "cache_salt values, given to sessions round-robin"))
    loras: Names = field(**names("lora-", "LoRA adapter names, given to sessions round-robin"))


def next_prompt(prev_full: Prompt, returned_token_ids: Sequence[int], spec: RequestSpec) -> Prompt:
    """Turn k's full prompt: turn k-1's full prompt, what the server returned, the new message."""
    returned = Segment(len(returned_token_ids), tokens=tuple(int(t) for t in returned_token_ids))
    return prev_full.extended(returned, *spec.prompt.segments)


def assumed_output(spec: RequestSpec, seed: int) -> Segment:
    """A stand-in for the answer to ``spec``: ``max_tokens`` tokens no other request has."""
    return Segment(spec.max_tokens, key=derive_key(seed, "assumed-output", spec.id))


def assumed_prompts(plan: Plan) -> dict[str, Prompt]:
    """The full prompt of every request of a session, later turns composed as if each
    answer were full length (a request of no session is its own ``prompt``: not held
    here, so a trace's plan is never held whole as objects; read ``.get(id, prompt)``)."""
    full: dict[str, Prompt] = {}
    last: dict[int, RequestSpec] = {}
    columns = plan.requests.column("session"), plan.requests.column("turn")
    order = sorted(
        (session, turn or 0, i)
        for i, (session, turn) in enumerate(zip(*columns, strict=True))
        if session is not None
    )
    for r in (plan.requests[i] for _, _, i in order):
        prev = last.get(r.session) if r.composes_history else None
        if prev is None:
            full[r.id] = r.prompt
        else:
            answer = assumed_output(prev, plan.seed)
            full[r.id] = full[prev.id].extended(answer, *r.prompt.segments)
        if r.session is not None:
            last[r.session] = r
    return full


def build(spec: WorkloadSpec, tokenizer: Tokenizer | None = None) -> Plan:
    p: MultiTurnParams = spec.params
    seed = spec.seed
    arrival = resolve_arrival(spec, FAMILY, arrival_name(spec))
    sched = schedule(spec, arrival, p.sessions, unit_size=p.turns)
    total = spec.load.num_requests or sched.count * p.turns
    turns = [min(p.turns, total - s * p.turns) for s in range(sched.count)]
    sizes = {
        "first": p.first_len.sample_int(rng(seed, "lengths", "first"), sched.count),
        "user": p.user_len.sample_int(rng(seed, "lengths", "user"), sum(turns)),
        "output": p.output_len.sample_int(rng(seed, "lengths", "output"), sum(turns)),
        "think": p.think_time.sample(rng(seed, "think"), sum(turns)),
    }
    system_lens = p.system_len.sample_int(rng(seed, "lengths", "system"), max(1, len(p.tenants)))
    requests: list[tuple[float, RequestSpec]] = []
    i = 0
    for s in range(sched.count):
        tenant = round_robin(p.tenants, s)
        system = Segment(
            int(system_lens[s % len(system_lens)]), key=derive_key(seed, "system", tenant)
        )
        start = sched.at(s)
        clock = float(s) if start is None else start
        for k in range(turns[s]):
            if k == 0:
                first = Segment(int(sizes["first"][s]), key=derive_key(seed, "user", s, 0))
                prompt, think, intended = Prompt(()).extended(system, first), 0.0, start
            else:
                user = Segment(int(sizes["user"][i]), key=derive_key(seed, "user", s, k))
                prompt, think, intended = Prompt((user,)), float(sizes["think"][i]), None
            clock += think
            request = RequestSpec(
                id=f"s{s:05d}-t{k:03d}",
                prompt=prompt,
                max_tokens=int(sizes["output"][i]),
                intended_s=intended,
                kind="turn",
                tenant=tenant,
                lora=round_robin(p.loras, s),
                session=s,
                turn=k,
                think_time_s=think,
            )
            requests.append((clock, request))
            i += 1
    order = np.argsort([t for t, _ in requests], kind="stable")
    return make_plan(spec, [requests[j][1] for j in order], arrival, sched.concurrency)


FAMILY = Family(
    name="multi-turn",
    summary="chat sessions; each turn re-sends the history with the returned answer",
    params=MultiTurnParams,
    build=build,
    default_rate=1.0,
)
