"""The simulator's speed: the decode fast path against step-by-step, side by side.

``simengine.decode_run`` lets the virtual clock take decodes as a cohort (work per step
and per event, not per token). This script runs the same work both ways — the
scoreboard's replays (``benchmarks/sim_to_real.py``'s lifecycle experiments, or those
whose name holds ``--only``) and a ``prefillscope simulate`` sweep — prints the CPU
seconds of each side by side with their ratio, and checks that every prediction is the
same: each replay's scored figures and each sweep point's latency figures, compared
exactly (the fast path does the same float arithmetic in the same order, so "equal"
means bit-equal, not within a tolerance).

``--diff A.json B.json`` instead compares two ``sim_to_real.py --json`` files (a run of
the whole board before and after a change): every number but the timing ones, exactly,
and prints how many were compared and which differ.

Run: ``.venv/bin/python benchmarks/sim_speed.py [--only SUBSTRING] [--requests N]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_to_real

from perfmodel.config import EngineConfig
from simengine import driver

#: Keys whose values are measurements of this process, not predictions.
TIMING_KEYS = frozenset({"cpu_s", "wall_s", "speed", "output_tokens_per_s", "grid_wall_s"})


def _fast_path(on: bool) -> None:
    """Every VirtualDriver built from here on takes the fast path or not."""
    driver.VirtualDriver.fast_forward_default = on


def leaves(doc: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every scalar of a JSON document with its path, timing keys left out."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key not in TIMING_KEYS:
                yield from leaves(value, f"{path}/{key}")
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from leaves(value, f"{path}[{i}]")
    else:
        yield path, doc


def differences(a: Any, b: Any) -> tuple[int, list[str]]:
    """How many scalars were compared, and each one that is not identical (NaN = NaN)."""
    left, right = dict(leaves(a)), dict(leaves(b))
    diffs = [f"{k}: only on one side" for k in left.keys() ^ right.keys()]
    for key in left.keys() & right.keys():
        x, y = left[key], right[key]
        same = x == y or (
            isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
        )
        if not same:
            diffs.append(f"{key}: {x!r} vs {y!r}")
    return len(left), sorted(diffs)


def timed(fn, *args) -> tuple[Any, float]:
    t0 = time.process_time()
    out = fn(*args)
    return out, time.process_time() - t0


def board(only: str | None) -> tuple[dict, dict, float, float]:
    jobs = sim_to_real.lifecycle_jobs(sim_to_real.DEFAULT_FIXTURES, only)
    base = EngineConfig(gpu="h100-sxm")
    _fast_path(False)
    slow, slow_s = timed(sim_to_real.run_lifecycle, jobs, base)
    _fast_path(True)
    fast, fast_s = timed(sim_to_real.run_lifecycle, jobs, base)
    return slow, fast, slow_s, fast_s


def sweep(requests: int, rate: float) -> tuple[dict, dict, float, float]:
    """A typical ``prefillscope simulate`` sweep through the command itself: the
    system-prompt workload over four chunk budgets, ``--json`` read back."""
    from prefillscope.commands.simulate import simulate as simulate_command

    def run() -> dict:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            simulate_command(
                workload="system-prompt", num_requests=requests, rate=rate,
                chunks="256,512,1024,2048", as_json=True,
            )  # fmt: skip
        return json.loads(out.getvalue())

    _fast_path(False)
    slow, slow_s = timed(run)
    _fast_path(True)
    fast, fast_s = timed(run)
    return slow, fast, slow_s, fast_s


def report(name: str, slow: Any, fast: Any, slow_s: float, fast_s: float) -> bool:
    compared, diffs = differences(slow, fast)
    ratio = slow_s / fast_s if fast_s else float("inf")
    print(
        f"{name:<28} step-by-step {slow_s:8.1f} CPU-s   fast path {fast_s:8.1f} CPU-s   "
        f"{ratio:5.1f}x   predictions: {compared} numbers, {len(diffs)} differ"
    )
    for line in diffs[:20]:
        print("   ", line)
    return not diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="replay only scoreboard experiments whose name holds this")
    parser.add_argument("--requests", type=int, default=2000, help="requests of the sweep")
    parser.add_argument("--rate", type=float, default=8.0, help="the sweep's request rate")
    parser.add_argument("--diff", nargs=2, metavar="JSON", help="compare two sim_to_real --json")
    args = parser.parse_args(argv)
    if args.diff:
        a, b = (json.loads(Path(p).read_text()) for p in args.diff)
        compared, diffs = differences(a, b)
        print(f"{compared} numbers compared (timing keys left out), {len(diffs)} differ")
        for line in diffs[:50]:
            print("   ", line)
        return 1 if diffs else 0
    ok = report(f"scoreboard ({args.only or 'all'})", *board(args.only))
    ok &= report(f"simulate sweep ({args.requests})", *sweep(args.requests, args.rate))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
