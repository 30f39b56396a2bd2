"""How often the ``compare`` gate is wrong: A/A false positives and planted-regression detection.

Data: virtual-time runs of the embedded engine (``simengine.driver.VirtualDriver``: the engine's
scheduler and cost model on a simulated clock, no client, no wall time) serving a real
workload plan (``workloads.build.build_plan``), one seed per run, ``--pairs`` × 2 runs per run
size. An A/A pair is two seeds of one configuration. A planted regression multiplies
NEW's ITL gaps above its own p95 by f, which multiplies its pooled p99 by exactly f (the
order above p95 is kept) and leaves everything below alone: +30 % and +100 % are planted
on the NEW run of each A/A pair.

Each pair goes through the code ``compare`` runs: the ITL sample of a run directory
(``RunSamples.sample``: gaps resampled in time blocks), ``compare_stats`` and the gate's
verdict (``diagnose.gate``). Printed per run size and gate limit: how often an A/A pair
does not pass (the false-positive rate: exit 1 under the default ``--inconclusive
fail``; in brackets, exit 1 under ``--inconclusive pass``, i.e. a FAIL on evidence) and
how often each planted regression does not pass (the detection rate; in brackets, FAIL
on evidence). Goals: false positives ≤ 5 %, detection ≥ 90 %.

Run: ``.venv/bin/python benchmarks/compare_calibration.py [--workload system-prompt]
[--sizes 200,1000] [--pairs 40] [--gates 10,25,50]``. About 2 minutes per 40 pairs of
1000 requests on one core.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from diagnose.compare import RunSamples
from diagnose.gate import FAIL, PASS, Gate, MetricResult
from diagnose.metrics import metric_spec
from diagnose.stats import Sample, compare_stats
from perfmodel.config import EngineConfig
from probes.token_gaps import token_gaps
from runtime.quantiles import quantile
from simengine.core import EngineCore, EngineRequest
from simengine.driver import VirtualDriver
from workloads.build import build_plan
from workloads.spec import load_spec

ITL_P99 = metric_spec("itl_p99")
PLANTED = (1.3, 2.0)
VOCAB = 32000


def simulate_run(workload: str, requests: int, rate: float, seed: int) -> RunSamples:
    """One virtual-time run of ``requests`` of ``workload`` at ``rate``, as compare reads it."""
    spec = load_spec(workload, {"num_requests": requests, "rate": rate, "seed": seed})
    arrivals = [
        (
            r.intended_s or 0.0,
            EngineRequest(
                request_id=r.id,
                prompt_token_ids=r.prompt.token_ids(VOCAB).tolist(),
                max_tokens=r.max_tokens,
                ignore_eos=True,
            ),
        )
        for r in build_plan(spec).requests
        if not r.warmup
    ]
    core = EngineCore(EngineConfig(model="llama-3.1-8b", gpu="h100-sxm"))
    result = VirtualDriver(core).run(arrivals, record_steps=False)
    rows = [(rid, t) for rid, timing in result.requests.items() for t in timing.token_times]
    chunks = pd.DataFrame(rows, columns=["request_id", "t_s"]).assign(n_tokens=1)
    gaps = token_gaps(chunks, list(result.requests))
    empty = pd.DataFrame()
    return RunSamples(Path(f"seed-{seed}"), {}, empty, gaps, empty, requests=len(arrivals))


def planted(sample: Sample, factor: float) -> Sample:
    """``sample`` with its values above its own p95 multiplied by ``factor``."""
    values = sample.values.copy()
    values[values > quantile(values, 0.95)] *= factor
    return Sample(values, sample.clusters)


def verdicts(base: Sample, new: Sample, gates: list[Gate], seed: int) -> list[str]:
    """The gate verdict (pass, fail, inconclusive) of each gate on ``itl_p99``."""
    (c,) = compare_stats(base, new, {"itl_p99": "p99"}, resamples=1000, seed=seed)
    return [MetricResult(ITL_P99, c, gate).gate_verdict or "" for gate in gates]


def rate_text(outcomes: list[str]) -> str:
    """Share not passed (exit 1 by default) and, in brackets, share failed on evidence."""
    n = len(outcomes)
    not_passed = sum(o != PASS for o in outcomes) / n
    failed = sum(o == FAIL for o in outcomes) / n
    return f"{not_passed:6.1%} ({failed:5.1%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="system-prompt")
    parser.add_argument("--sizes", default="200,1000", help="requests per run, comma-separated")
    parser.add_argument("--rate", type=float, default=10.0, help="arrivals per second")
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--gates", default="10,25,50", help="gate limits in %% on itl_p99")
    args = parser.parse_args()
    gates = [Gate(ITL_P99, float(x) / 100.0) for x in args.gates.split(",")]
    print(f"workload {args.workload} at {args.rate:g} req/s, {args.pairs} A/A pairs per size")
    print("share not passed (exit 1 by default), in brackets share FAIL on evidence")
    header = f"{'requests':>8}  {'gate':>10}  {'A/A (false pos.)':>17}"
    print(header + "".join(f"  {f'+{(f - 1) * 100:.0f}% planted':>17}" for f in PLANTED))
    for size in (int(s) for s in args.sizes.split(",")):
        started = time.perf_counter()
        outcomes: dict[float, list[list[str]]] = {f: [] for f in (1.0, *PLANTED)}
        for pair in range(args.pairs):
            base, new = (
                simulate_run(args.workload, size, args.rate, 1000 * size + 2 * pair + k).sample(
                    ITL_P99
                )
                for k in (0, 1)
            )
            for factor in outcomes:
                changed = new if factor == 1.0 else planted(new, factor)
                outcomes[factor].append(verdicts(base, changed, gates, seed=pair))
        for i, gate in enumerate(gates):
            cells = [rate_text([row[i] for row in outcomes[f]]) for f in (1.0, *PLANTED)]
            line = f"{size:>8}  {gate.text:>10}  {cells[0]:>17}"
            print(line + "".join(f"  {cell:>17}" for cell in cells[1:]))
        print(f"{'':>8}  ({time.perf_counter() - started:.0f} s for {2 * args.pairs} runs)")


if __name__ == "__main__":
    main()
