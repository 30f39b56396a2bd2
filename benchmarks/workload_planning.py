"""How long planning takes: building plans and their dry-run statistics, trace and synthetic.

``bench --dry-run`` builds the plan and replays it through the prefix oracle before a
single request is sent; on the real Mooncake traces (10^8 prompt tokens for the
conversation trace) that must stay well under ten seconds. For each workload this prints
the requests and prompt tokens, the seconds to build the plan, the seconds for
``plan_stats`` (unbounded pool at the trace's block size, and a finite pool), the
process's peak resident memory so far, and the hit rates found (block hit rates 0.640
synthetic and 0.366 conversation are the traces' published infinite-cache figures).

Run: ``.venv/bin/python benchmarks/workload_planning.py [--pool-blocks 20000]``
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from workloads.build import build_plan
from workloads.spec import load_spec
from workloads.stats import plan_stats

T = TypeVar("T")

TRACES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "traces"

WORKLOADS: list[tuple[str, dict[str, object]]] = [
    (f"trace:{TRACES / 'mooncake_synthetic_trace.jsonl'}", {}),
    (f"trace:{TRACES / 'mooncake_conversation_trace.jsonl'}", {}),
    ("doc-qa", {"num_requests": 5000}),
    ("multi-turn", {"num_requests": 5000}),
]


def _timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, float, float]:
    """``fn``'s result with its wall and CPU seconds (CPU is what a busy machine cannot inflate)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def measure(workload: str, overrides: dict[str, object], pool_blocks: int) -> None:
    plan, build_wall, build_cpu = _timed(build_plan, load_spec(workload, overrides))
    stats, stats_wall, stats_cpu = _timed(plan_stats, plan)
    finite, finite_wall, finite_cpu = _timed(plan_stats, plan, num_blocks=pool_blocks)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    prefix = stats["prefix"]
    name = workload.rsplit("/", 1)[-1]
    print(
        f"{name}: {stats['requests']} requests, {stats['prompt_tokens']['total'] / 1e6:.1f} M"
        f" prompt tokens, block size {prefix['block_size']}\n"
        f"  build {build_wall:.2f} s ({build_cpu:.2f} CPU-s)"
        f" | stats {stats_wall:.2f} s ({stats_cpu:.2f} CPU-s)"
        f" | stats with {pool_blocks} blocks {finite_wall:.2f} s ({finite_cpu:.2f} CPU-s)"
        f" | max RSS {peak_mib:.0f} MiB\n"
        f"  block hit {prefix['block_hit_rate']:.3f}, token hit {prefix['token_hit_rate']:.3f},"
        f" expected {prefix['expected_hit_rate']:.3f}"
        f" (with {pool_blocks} blocks {finite['prefix']['expected_hit_rate']:.3f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pool-blocks", type=int, default=20000)
    args = parser.parse_args()
    for workload, overrides in WORKLOADS:
        measure(workload, overrides, args.pool_blocks)


if __name__ == "__main__":
    main()
