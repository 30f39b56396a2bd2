"""llama.cpp's slots replayed in the order the run happened, with what the oracle cannot know.

Which slot a request lands on depends on which slots were busy when the server took it
(``workloads.slots``), so the slot oracle always runs after the run, over the recorded
timeline: a request takes a slot when it was sent, if one was idle; it gives the slot
its prompt and output (but the last token) when it ended, and a request waiting for a
slot takes the one freed. At one instant an end goes before a send: llama-server
releases a slot before the final event of its stream reaches the client.

Where the timeline cannot decide, the request's ``oracle_note`` says why instead of
pretending: it waited for a slot (the one it got depended on which request ended first
on the server), or it was sent within ``NEAR_S`` of another send or just before another
request's end (the server may have seen the two in the other order).
"""

from __future__ import annotations

import bisect
import copy
import math
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workloads.oracle import HeldRequest, PrefixOracle
from workloads.plan import Plan, Prompt, RequestSpec, Segment
from workloads.prefix import CacheScope

if TYPE_CHECKING:
    import pandas as pd

#: The requests-table column with the oracle's reason when it could not know.
ORACLE_NOTE = "oracle_note"
#: Events closer than this (seconds on the run clock) may have reached the server in
#: the other order: the loopback and the server's accept loop take about a millisecond.
NEAR_S = 0.002
_ENDED, _SENT = 0, 1


def missing(value: Any) -> bool:
    """A null of the requests table: ``None``, or NaN as pandas reads one."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def number(value: Any) -> float:
    return 0.0 if missing(value) else float(value)


def kept_output(row: Mapping[str, Any]) -> tuple[list[int], int]:
    """The output a request leaves in the cache: its ids but the last (which never enters
    the KV cache), or, when the ids were not returned, how many tokens stand in for them."""
    returned = row.get("output_token_ids")
    ids = [] if missing(returned) else [int(t) for t in returned]
    unknown = 0 if ids else max(0, int(number(row.get("output_tokens"))) - 1)
    return ids[:-1], unknown


def recorded_prompts(
    plan: Plan, requests: pd.DataFrame, composed: Mapping[str, Prompt]
) -> Iterator[tuple[RequestSpec, Prompt, dict[str, Any]]]:
    """Each recorded request that was sent, with its prompt (a later turn's as the load
    generator composed it) and its row; one whose history has no token ids is skipped."""
    specs = {r.id: r for r in plan.requests}
    for row in requests.to_dict("records"):
        spec = specs.get(row["id"])
        if spec is None or missing(row.get("sent_s")):
            continue
        prompt = composed.get(spec.id) if spec.composes_history else spec.prompt
        if prompt is not None:
            yield spec, prompt, row


@dataclass
class SlotReplay:
    """Expected cached tokens by request id, and the notes where the oracle is unsure."""

    expected: dict[str, int | None] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def slots_as_it_happened(
    oracle: PrefixOracle,
    plan: Plan,
    requests: pd.DataFrame,
    composed: Mapping[str, Prompt],
    model: str,
    *,
    salted: bool = True,
) -> SlotReplay:
    """Replay the recorded requests through ``oracle`` (a slot cache) on their timeline;
    ``salted``: requests of another ``cache_salt`` share nothing (not on llama-server)."""
    events: list[tuple[float, int, RequestSpec, Prompt, dict[str, Any]]] = []
    for spec, prompt, row in recorded_prompts(plan, requests, composed):
        events.append((row["sent_s"], _SENT, spec, prompt, row))
        if not missing(row.get("end_s")):
            events.append((row["end_s"], _ENDED, spec, prompt, row))
    events.sort(key=lambda e: e[:2])
    sends = [t for t, kind, *_ in events if kind == _SENT]
    ends = [t for t, kind, *_ in events if kind == _ENDED]
    slots = oracle.cache_model.slots
    out = SlotReplay()
    held: dict[str, HeldRequest] = {}
    rows: dict[str, dict[str, Any]] = {}
    prompts: dict[str, Prompt] = {}
    doubt: dict[int, str] = {}  # slot id -> the uncertain request whose tokens it holds
    waiting: deque[tuple[RequestSpec, Prompt]] = deque()

    def scope_of(spec: RequestSpec) -> CacheScope:
        return spec.scope(model) if salted else CacheScope(model=model)

    def start(spec: RequestSpec, prompt: Prompt) -> bool:
        taken = oracle.hold(prompt, scope_of(spec))
        if taken is None:
            return False
        held[spec.id] = taken
        out.expected[spec.id] = taken.cached
        slot = taken.sequence.slot
        if spec.id not in out.notes and slot.id in doubt:
            out.notes[spec.id] = (
                f"its slot holds what {doubt[slot.id]} left, whose slot was a matter of timing"
            )
        if spec.id in out.notes:
            doubt[slot.id] = spec.id
        else:
            doubt.pop(slot.id, None)
        return True

    for t, kind, spec, prompt, row in events:
        rows[spec.id], prompts[spec.id] = row, prompt
        if kind == _SENT:
            if _near(sends, t, NEAR_S) > 1 or _near(ends, t + NEAR_S / 2, NEAR_S / 2):
                out.notes[spec.id] = (
                    f"sent within {NEAR_S * 1e3:g} ms of another request's send or end: "
                    "the server may have taken them in the other order"
                )
            elif spec.id not in out.notes:
                finishing = _finishing(oracle, held, rows, prompts, t, prompt, scope_of(spec))
                if finishing:
                    out.notes[spec.id] = finishing
            if waiting or not start(spec, prompt):
                waiting.append((spec, prompt))
                out.expected[spec.id] = None
                out.notes[spec.id] = (
                    f"sent while all {slots} slots were busy: the slot it got is the one "
                    "freed first on the server, a matter of timing (the replay assumes the "
                    "first recorded end)"
                )
            continue
        taken = held.pop(spec.id, None)
        if taken is None:  # still waiting in the replay, though the server served it
            waiting = deque(w for w in waiting if w[0].id != spec.id)
            out.notes[spec.id] = "ended before the replay found it a slot: slot unknown"
            continue
        kept, unknown = kept_output(row)
        oracle.finish(
            taken, prompt.extended(Segment(len(kept), tokens=tuple(kept))), extra_tokens=unknown
        )
        while waiting and start(*waiting[0]):
            waiting.popleft()
    return out


def _finishing(
    oracle: PrefixOracle,
    held: Mapping[str, HeldRequest],
    rows: Mapping[str, Mapping[str, Any]],
    prompts: Mapping[str, Prompt],
    t: float,
    prompt: Prompt,
    scope: CacheScope,
) -> str | None:
    """Why a request sent at ``t`` may have found other slots free: running requests past
    their first token may already have ended on the server (its release comes before the
    client reads the end). ``None`` when their ending first would not change its hit."""
    maybe_done = [
        rid
        for rid in held
        if not missing(rows[rid].get("first_token_s")) and rows[rid]["first_token_s"] <= t
    ]
    if not maybe_done:
        return None
    pool = oracle.pool
    assert pool is not None
    copies = copy.deepcopy((pool, [held[rid].sequence for rid in maybe_done]))
    other, sequences = copies
    for rid, seq in zip(maybe_done, sequences, strict=True):
        kept, unknown = kept_output(rows[rid])
        tokens = oracle.hasher.materialise(prompts[rid]).tolist() + kept + [-1] * unknown
        seq.commit(tokens, len(tokens))
        seq.release()
    tokens = oracle.hasher.materialise(prompt)
    now = pool.sequence(scope).peek(tokens)
    then = other.sequence(scope).peek(tokens)
    if now == then:
        return None
    return (
        f"sent while {', '.join(maybe_done)} was finishing: had the server freed its slot "
        f"first, {then} tokens would be cached, not {now}"
    )


def _near(times: list[float], t: float, width: float) -> int:
    """How many of the sorted ``times`` lie within ``width`` of ``t``."""
    return bisect.bisect_right(times, t + width) - bisect.bisect_left(times, t - width)
