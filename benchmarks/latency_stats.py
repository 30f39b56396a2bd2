"""How long the statistics take at the largest run sizes we plan for.

A synthetic run of 10^5 requests with 100 single-token chunks each (10^7 chunks) goes
through ``summarize_frames`` (what ``bench`` writes as ``summary.json``), then through
the comparison ``compare`` makes: ITL resampled by request (cluster bootstrap, five
statistics), TTFT (independent values, six statistics), each against a second run.
Figures: wall seconds per stage and peak memory of the process.

Run: ``.venv/bin/python benchmarks/latency_stats.py [--requests N] [--tokens T]``
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import pandas as pd

from diagnose.stats import Sample, compare_stats
from probes.latency import summarize_frames
from probes.token_gaps import token_gaps
from runfmt.metrics import ITL, TTFT, stat_name
from runfmt.summary_sections import Stats


def synthetic(requests: int, tokens: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Requests at 100/s, log-normal TTFT and per-request ITL levels, one token per chunk."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"r{i}" for i in range(requests)], dtype=object)
    intended = np.arange(requests) / 100.0
    first = intended + rng.lognormal(np.log(0.05), 0.3, requests)
    gaps = np.repeat(rng.lognormal(np.log(0.01), 0.2, requests), tokens - 1)
    gaps = gaps * rng.lognormal(0.0, 0.1, gaps.size)
    offsets = np.cumsum(gaps.reshape(requests, tokens - 1), axis=1)
    times = np.concatenate([first[:, None], first[:, None] + offsets], axis=1)
    chunks = pd.DataFrame(
        {"request_id": np.repeat(ids, tokens), "t_s": times.ravel(), "n_tokens": 1}
    )
    reqs = pd.DataFrame(
        {
            "id": ids,
            "intended_s": intended,
            "sent_s": intended,
            "first_token_s": first,
            "end_s": times[:, -1],
            "output_tokens": tokens,
            "prompt_tokens": 1000,
            "status": "ok",
            "warmup": False,
        }
    )
    return reqs, chunks


def timed(label: str, fn):
    start = time.perf_counter()
    result = fn()
    print(f"{label:<48} {time.perf_counter() - start:7.2f} s")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args()
    base_reqs, base_chunks = timed(
        "generate base run", lambda: synthetic(args.requests, args.tokens, 1)
    )
    new_reqs, new_chunks = synthetic(args.requests, args.tokens, 2)
    print(f"{args.requests:,} requests, {len(base_chunks):,} chunks per run")
    summary = timed(
        "summarize_frames (summary.json)",
        lambda: summarize_frames(base_reqs, base_chunks, pd.DataFrame()),
    )
    itl_stats = summary.latency(ITL.key) or Stats()
    print(f"  itl p99 {(itl_stats.p99 or 0) * 1e3:.2f} ms over {itl_stats.count or 0:,}")
    base_gaps = timed("token_gaps (one run)", lambda: token_gaps(base_chunks))
    new_gaps = token_gaps(new_chunks)
    itl = {stat_name(ITL, s): s for s in ("mean", "p50", "p90", "p95", "p99")}
    result = timed(
        "compare ITL, cluster bootstrap, 5 statistics",
        lambda: compare_stats(
            Sample.of(base_gaps.gap_s, base_gaps.request),
            Sample.of(new_gaps.gap_s, new_gaps.request),
            itl,
            resamples=args.resamples,
        ),
    )
    for c in result:
        print(f"  {c.metric:<10} ratio {c.ratio:.4f} [{c.ci_low:.4f}, {c.ci_high:.4f}]")
    ttft = {stat_name(TTFT, s): s for s in ("mean", "p50", "p90", "p95", "p99", "p999")}
    timed(
        "compare TTFT, independent values, 6 statistics",
        lambda: compare_stats(
            Sample.of(base_reqs["first_token_s"] - base_reqs["intended_s"]),
            Sample.of(new_reqs["first_token_s"] - new_reqs["intended_s"]),
            ttft,
            resamples=args.resamples,
        ),
    )
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory {peak_mib:,.0f} MiB")


if __name__ == "__main__":
    main()
