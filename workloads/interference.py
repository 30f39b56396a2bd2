"""``interference``: steady decode streams, and long prompts dropped into them.

The workload behind a chunk-size A/B. ``concurrency`` closed-loop users keep short-
prompt, long-output requests running (kind ``decode``), so the server always has a
population of decodes whose inter-token latency is the thing to protect; long prompts
(kind ``long-prompt``) arrive open-loop at ``rate``, the first one mean gap after the
streams start (``amid_streams``). Each long prompt's prefill shares
scheduler steps with the decodes: large chunks finish it sooner (better TTFT) but
stretch the steps the decodes ride in (worse ITL). Nothing is shared between requests,
so the prefix cache stays out of the comparison.

``--num-requests`` (or ``--duration`` × ``rate``) counts the long prompts; size
``stream_requests`` so that the streams outlast the injections.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import chain
from typing import TYPE_CHECKING

from workloads.distributions import Distribution
from workloads.errors import InputError
from workloads.family import (
    Family,
    Schedule,
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

DEFAULT_STREAMS = 8


@dataclass(frozen=True)
class InterferenceParams:
    stream_prompt_len: Distribution = field(
        **dist(64, 1, "prompt tokens of a decode-stream request")
    )
    stream_output_len: Distribution = field(
        **dist(1024, 1, "max_tokens of a decode-stream request")
    )
    stream_requests: int = field(**number(4, 1, "requests each decode stream sends, back to back"))
    long_prompt_len: Distribution = field(
        **dist(8192, 1, "prompt tokens of an injected long prompt")
    )
    long_output_len: Distribution = field(**dist(16, 1, "max_tokens of an injected long prompt"))
    long_prompts: int = field(**number(16, 1, "long prompts when no count/duration is given"))


def build(spec: WorkloadSpec, tokenizer: Tokenizer | None = None) -> Plan:
    p: InterferenceParams = spec.params
    seed = spec.seed
    name = spec.load.arrival or "poisson"
    if name == "closed":
        raise InputError(
            "arrival",
            "interference injects its long prompts open-loop",
            "set their rate with --rate; --concurrency sets the number of decode streams",
        )
    arrival = resolve_arrival(spec, FAMILY, name)
    sched = amid_streams(schedule(spec, arrival, p.long_prompts), spec.load.duration_s)
    streams = spec.load.concurrency or DEFAULT_STREAMS
    decode = unique_requests(
        seed, "decode", p.stream_prompt_len, p.stream_output_len, streams * p.stream_requests
    )
    long = unique_requests(
        seed, "long-prompt", p.long_prompt_len, p.long_output_len, sched.count, sched
    )
    return make_plan(spec, chain(decode, long), arrival, streams, decode_streams=streams)


def amid_streams(sched: Schedule, duration_s: float | None) -> Schedule:
    """The long prompts one mean gap (1 / rate) later than the arrival process sends
    them. A renewal process sends its first at t=0, beside the streams' own first
    requests: that prompt's prefill then shares steps with the streams' prefills, before
    any decode gap exists, so it stalls nothing — a run of N long prompts had N − 1
    stall events (9 for 10: under ``compare``'s minimum of 10). One mean gap later every
    long prompt lands amid running decodes; the gaps between them are unchanged. With
    ``--duration``, those moved past it are left out, as the process would have."""
    rate = sched.arrival.peak_rate
    if sched.times is None or not rate:
        return sched
    times = sched.times + 1.0 / rate
    if duration_s is not None:
        times = times[times < duration_s]
    return replace(sched, count=len(times), times=times)


FAMILY = Family(
    name="interference",
    summary="closed-loop decode streams plus open-loop long prompts (chunk-size A/B)",
    params=InterferenceParams,
    build=build,
    default_rate=0.5,
)
