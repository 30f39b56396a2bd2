"""How closely ``bench`` agrees with the embedded engine's own latency histograms.

For a few 200-request shared-prefix runs against the in-process engine, prints the
client's mean TTFT (from the actual send and from the intended send) and per-token ITL
next to the engine's ``vllm:time_to_first_token_seconds`` and
``vllm:inter_token_latency_seconds`` means over the run, the difference, and the
client's dispatch lag — the figures behind tests/session/test_bench_agreement.py. What separates
the two TTFTs is what the engine cannot see: the loopback both ways and each event loop
noticing the bytes (the two loops share one interpreter here).

    .venv/bin/python benchmarks/bench_agreement.py [--runs 2]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import tempfile
from pathlib import Path

from prefillscope.dashboard import PlainProgress
from runfmt.metrics import ITL, TTFT, TTFT_SENT
from session.bench_options import BenchOptions
from session.bench_runner import run_bench

#: A 2k-token uncached suffix behind a shared 1k prefix: TTFT is prefill-bound.
PREFILL_BOUND = dict(groups=4, prefix_len=1024, suffix_len=2048, output_len=16, rate=12)
CASES = {
    "system-prompt preset, 10 req/s": ("system-prompt", {"rate": 10}),
    "2k-token uncached suffix, 12 req/s": ("shared-prefix", PREFILL_BOUND),
}


def one_run(workload: str, overrides: dict[str, object]) -> dict[str, float]:
    out = Path(tempfile.mkdtemp()) / "run"
    overrides = {**overrides, "num_requests": 200}
    options = BenchOptions(workload=workload, overrides=overrides, out=out, gpu="off")
    summary = asyncio.run(run_bench(options, PlainProgress(io.StringIO()))).summary
    server, lag = summary.server, summary.client.dispatch_lag
    assert server is not None and server.ttft_s is not None and server.itl_s is not None
    return {
        "ttft_sent": summary.statistic(TTFT_SENT.key, "mean"),
        "ttft": summary.statistic(TTFT.key, "mean"),
        "engine_ttft": server.ttft_s.mean,
        "itl": summary.statistic(ITL.key, "mean"),
        "engine_itl": server.itl_s.mean,
        "lag_p50": lag.p50 if lag is not None else None,
        "lag_p99": summary.client.dispatch_lag_p99_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    for name, (workload, overrides) in CASES.items():
        print(name)
        for _ in range(args.runs):
            r = one_run(workload, overrides)
            gap = r["ttft_sent"] - r["engine_ttft"]
            print(
                f"  TTFT client {r['ttft_sent'] * 1e3:8.2f} ms (intended {r['ttft'] * 1e3:.2f})"
                f"  engine {r['engine_ttft'] * 1e3:8.2f} ms  diff {gap * 1e3:+.2f} ms"
                f" ({gap / r['engine_ttft']:+.2%})"
                f" | ITL client {r['itl'] * 1e3:.3f} engine {r['engine_itl'] * 1e3:.3f} ms"
                f" ({r['itl'] / r['engine_itl'] - 1:+.3%})"
                f" | dispatch lag p50 {r['lag_p50'] * 1e3:.2f} p99 {r['lag_p99'] * 1e3:.2f} ms"
            )


if __name__ == "__main__":
    main()
