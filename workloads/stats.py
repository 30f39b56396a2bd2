"""``plan_stats``: what a plan will send, before sending it (``bench --dry-run``).

Besides counts and length percentiles it reports two prefix figures, both from one pass
over the plan in send order:

* **Reuse the workload allows** — ``block_hit_rate`` / ``token_hit_rate``: the share of
  prompt blocks (the last, partial one included) whose whole prefix an earlier request
  already sent, with an unbounded cache. This is the "infinite-cache contiguous-prefix
  hit rate" traces are described by (Mooncake: 0.640 synthetic, 0.366 conversation at
  their 512-token blocks) and the ceiling any server can reach.
* **What a server should report** — ``expected_hit_rate`` (tokens, the figure
  ``summary.json`` compares with the server's ``cached_tokens``) and
  ``expected_block_hit_rate``: the oracle's replay with engine rules — full blocks
  only, the last prompt token always recomputed, and the pool's size when given.

The block size defaults to the trace's own for Mooncake traces, else 16.
"""

from __future__ import annotations

import numpy as np

from runtime.quantiles import quantile
from workloads.multi_turn import assumed_prompts
from workloads.oracle import DEFAULT_VOCAB_SIZE, PrefixOracle, replay_sequence
from workloads.plan import PackedRequests, Plan

#: Block size for statistics when neither the caller nor the plan says (vLLM's default).
DEFAULT_BLOCK_SIZE = 16

_PERCENTILES = (50, 90, 99)


def native_block_size(plan: Plan) -> int | None:
    """The block size a trace's ``hash_ids`` were cut with, if the plan came from one."""
    value = plan.spec.get("trace_block_size")
    return int(value) if value else None


def length_summary(values: list[int]) -> dict[str, float | int]:
    if not values:
        return {"total": 0, "count": 0}
    arr = np.asarray(values)
    out: dict[str, float | int] = {
        "total": int(arr.sum()),
        "count": len(arr),
        "mean": float(arr.mean()),
        "min": int(arr.min()),
        "max": int(arr.max()),
    }
    for q in _PERCENTILES:
        out[f"p{q}"] = quantile(arr, q / 100)
    return out


def _schedule(plan: Plan) -> dict[str, object]:
    measured = plan.measured
    times = sorted(t for t in measured.column("intended_s") if t is not None)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    follow_ups = _follow_ups(measured)
    return {
        "open_loop_requests": len(times),
        "closed_loop_requests": len(measured) - len(times) - follow_ups,
        "follow_up_turns": follow_ups,
        "schedule_s": span,
        "offered_rate_per_s": (len(times) - 1) / span if span > 0 else None,
    }


def _follow_ups(requests: PackedRequests) -> int:
    """Later turns of a session (read from the columns: no request built)."""
    pairs = zip(requests.column("session"), requests.column("turn"), strict=True)
    return sum(1 for session, turn in pairs if session is not None and turn)


def _rate(num: float, den: float) -> float | None:
    return num / den if den else None


def prefix_stats(
    plan: Plan,
    block_size: int,
    num_blocks: int | None = None,
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    model: str = "",
) -> dict[str, object]:
    """Workload reuse (unbounded) and the oracle's expectation (pool as given) for ``plan``."""
    oracle = PrefixOracle(block_size, num_blocks, model, vocab_size=vocab_size)
    hasher = oracle.hasher
    prompts = assumed_prompts(plan)
    seen: set[int] = set()
    blocks = reused_blocks = tokens = reused_tokens = expected = 0
    for r in plan.requests:
        full, scope = prompts.get(r.id, r.prompt), r.scope(model)
        recorded = replay_sequence(plan, r, full)
        chain, tail = hasher.chain_and_tail(recorded, scope, len(full))
        ids = chain[: len(full) // block_size] + ([] if tail is None else [tail])
        hit = 0
        while hit < len(ids) and ids[hit] in seen:
            hit += 1
        seen.update(ids)
        seen.update(chain)
        cached = oracle.record(recorded, scope, prompt_len=len(full), hashes=chain)
        if r.warmup:
            continue
        n = len(full)
        blocks += len(ids)
        reused_blocks += hit
        tokens += n
        reused_tokens += min(hit * block_size, n)
        expected += cached
    return {
        "block_size": block_size,
        "num_blocks": num_blocks,
        "pool": "unbounded" if num_blocks is None else f"{num_blocks} blocks",
        "block_hit_rate": _rate(reused_blocks, blocks),
        "token_hit_rate": _rate(reused_tokens, tokens),
        "expected_cached_tokens": expected,
        "expected_hit_rate": _rate(expected, tokens),
        "expected_block_hit_rate": _rate(expected / block_size, blocks),
    }


def plan_stats(
    plan: Plan,
    block_size: int | None = None,
    num_blocks: int | None = None,
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    model: str = "",
) -> dict[str, object]:
    """Requests, token totals and percentiles, schedule, and the prefix figures of ``plan``.

    Later turns of multi-turn sessions are counted with their full assumed prompt (the
    history as if every answer were ``max_tokens`` long).
    """
    bs = block_size or native_block_size(plan) or DEFAULT_BLOCK_SIZE
    measured = plan.measured
    prompts = assumed_prompts(plan)
    multi_turn = _follow_ups(measured) > 0
    return {
        "workload": plan.workload,
        "seed": plan.seed,
        "arrival": plan.arrival,
        "concurrency": plan.concurrency,
        "requests": len(measured),
        "warmup_requests": len(plan.requests) - len(measured),
        **_schedule(plan),
        "prompt_tokens": length_summary([len(prompts.get(r.id, r.prompt)) for r in measured]),
        "output_tokens": length_summary(measured.column("max_tokens")),
        "history": "answers assumed max_tokens long" if multi_turn else None,
        "prefix": prefix_stats(plan, bs, num_blocks, vocab_size=vocab_size, model=model),
    }
