"""``bench --dry-run``: the plan a run would send and its statistics, with nothing sent.

The plan is built with token prompts: the statistics are those of text prompts of the
same token counts. Besides the plan's own figures (``workloads.stats.plan_stats``:
requests, token totals, the expected prefix hit rate for the pool) it says how long a
closed loop would run (it sends a prefix of its plan) and the worker processes a run of it
would take (``--workers`` asked, or as its planned token rate needs).
"""

from __future__ import annotations

from typing import Any


def dry_run_stats(
    workload: str,
    overrides: dict[str, object],
    block_size: int | None,
    num_blocks: int | None,
    *,
    workers: int | None = None,
    max_concurrency: int | None = None,
) -> dict[str, Any]:
    """The statistics of the plan ``workload`` with ``overrides`` builds (see above)."""
    from session.bench_plan import build_workload_plan, resolve_workload
    from session.shards import fewer_workers_reason, planned_tokens_per_s, split_plan
    from workloads.stats import plan_stats

    spec, deadline_s = resolve_workload(workload, {**overrides, "prompt_format": "tokens"})
    plan = build_workload_plan(spec)
    stats = plan_stats(plan, block_size, num_blocks)
    if deadline_s is not None:
        stats["closed_loop_duration_s"] = deadline_s  # the run sends a prefix of the plan
    shards = len(split_plan(plan, workers, max_concurrency))
    stats["workers"] = {
        "asked": workers,
        "run": shards,
        "planned_tokens_per_s": planned_tokens_per_s(plan, max_concurrency),
        "bound_by": fewer_workers_reason(plan, workers, max_concurrency),
    }
    return stats
