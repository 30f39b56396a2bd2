"""What every workload family shares: its registry record, its schedule, its plan.

A family (shared-prefix, multi-turn, long-prompt, interference, trace) is a params
dataclass plus a ``build`` function. The load settings every family honours the same
way — how many requests, for how long, which arrival process at which rate, closed-loop
concurrency — are resolved here once, so ``--rate`` means the same thing everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from workloads.arrivals import Arrival, ClosedLoop, make_arrival
from workloads.distributions import Distribution
from workloads.errors import InputError
from workloads.limits import check_plan_size
from workloads.plan import PackedRequests, Plan, Prompt, RequestSpec, Segment
from workloads.seeding import derive_key, rng

if TYPE_CHECKING:
    from workloads.spec import WorkloadSpec
    from workloads.tokenizer import Tokenizer


@dataclass(frozen=True)
class Family:
    """A workload family: its knobs, its builder and its named presets."""

    name: str
    summary: str
    params: type
    build: Callable[[WorkloadSpec, Tokenizer | None], Plan]
    presets: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    #: Open-loop rate (requests/s) used when neither ``rate`` nor ``concurrency`` is given.
    default_rate: float = 2.0


@dataclass(frozen=True)
class Schedule:
    """How many units (requests, sessions, trace rows) a plan has and when each starts."""

    count: int
    times: np.ndarray | None
    arrival: Arrival

    def at(self, i: int) -> float | None:
        return None if self.times is None else float(self.times[i])

    @property
    def concurrency(self) -> int | None:
        return self.arrival.concurrency if isinstance(self.arrival, ClosedLoop) else None


def arrival_name(spec: WorkloadSpec, default: str = "poisson") -> str:
    """The arrival asked for, else implied (``concurrency`` alone: closed; ``rate``: poisson)."""
    load = spec.load
    if load.arrival is not None:
        return load.arrival
    if load.concurrency is not None and load.rate is None:
        return "closed"
    return "poisson" if load.rate is not None else default


def resolve_arrival(
    spec: WorkloadSpec,
    family: Family,
    name: str,
    trace_offsets_s: tuple[float, ...] | None = None,
    time_scale: float = 1.0,
) -> Arrival:
    load = spec.load
    if name == "closed" and load.rate is not None:
        raise InputError(
            "rate",
            "closed-loop concurrency and an open-loop rate exclude each other",
            "drop --rate, or cap an open-loop run with the load generator's --max-concurrency",
        )
    return make_arrival(
        name,
        rate=family.default_rate if load.rate is None else load.rate,
        cv=load.cv,
        start_rate=load.start_rate,
        ramp=load.ramp,
        concurrency=load.concurrency,
        trace_offsets_s=trace_offsets_s,
        time_scale=time_scale,
    )


def schedule(
    spec: WorkloadSpec,
    arrival: Arrival,
    default_count: int,
    unit_size: int = 1,
) -> Schedule:
    """Units to build and their start times; ``unit_size`` requests make one unit.

    ``num_requests`` counts requests, so a multi-turn plan of 4-turn sessions asked for
    10 requests has 3 sessions (the last one cut short by its builder).
    """
    load = spec.load
    count = None if load.num_requests is None else math.ceil(load.num_requests / unit_size)
    if count is None and load.duration_s is None:
        count = default_count
    if count is not None:
        check_plan_size(count * unit_size, "the workload")
    elif load.duration_s is not None and arrival.peak_rate is not None:
        check_plan_size(
            arrival.peak_rate * load.duration_s * unit_size, "--duration × --rate", "duration"
        )
    times = arrival.times(rng(spec.seed, "arrivals"), count, load.duration_s)
    if times is not None:
        return Schedule(len(times), times, arrival)
    if count is None:
        raise InputError(
            "duration",
            "a closed-loop plan cannot be sized by a duration",
            "give --num-requests with --concurrency",
        )
    return Schedule(count, None, arrival)


def round_robin(names: Sequence[str], index: int) -> str | None:
    """The ``index``-th name cycling through ``names``; ``None`` when there are none."""
    return names[index % len(names)] if names else None


def make_plan(
    spec: WorkloadSpec,
    requests: Iterable[RequestSpec],
    arrival: Arrival,
    concurrency: int | None = None,
    **extra: Any,
) -> Plan:
    """The plan, recording the resolved spec (and ``extra`` facts) for ``run.json``."""
    return Plan(
        workload=spec.name,
        seed=spec.seed,
        requests=requests,
        spec={**spec.to_dict(), **extra},
        arrival=arrival.name,
        concurrency=concurrency,
    )


def unique_requests(
    seed: int,
    kind: str,
    prompt_len: Distribution,
    output_len: Distribution,
    count: int,
    sched: Schedule | None = None,
) -> PackedRequests:
    """``count`` requests that share no token with any other (each prompt its own run),
    packed as they are made (no list of them is held)."""
    prompts = prompt_len.sample_int(rng(seed, "lengths", kind, "prompt"), count)
    outputs = output_len.sample_int(rng(seed, "lengths", kind, "output"), count)
    return PackedRequests.pack(
        RequestSpec(
            id=f"{kind}-{i:06d}",
            prompt=Prompt((Segment(int(prompts[i]), key=derive_key(seed, kind, i)),)),
            max_tokens=int(outputs[i]),
            intended_s=None if sched is None else sched.at(i),
            kind=kind,
        )
        for i in range(count)
    )
