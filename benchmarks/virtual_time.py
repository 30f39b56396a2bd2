"""How fast the virtual-time driver simulates: tokens of engine work per wall-clock second.

A realistic mixed workload for llama-3.1-8b on an H100: Poisson arrivals, a shared
1024-token system prompt (so the prefix cache works), log-normal user turns and output
lengths, a fifth of requests stopping at EOS, chunked prefill at budget 2048. The figure
that matters is output tokens simulated per wall second (target ≥ 200k); prompt tokens
processed per second are printed too.

Run: ``.venv/bin/python benchmarks/virtual_time.py [--requests N] [--rate R]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from perfmodel.config import EngineConfig
from simengine.core import EngineCore, EngineRequest
from simengine.driver import VirtualDriver

SYSTEM_PROMPT_TOKENS = 1024


def workload(n: int, rate: float, seed: int) -> list[tuple[float, EngineRequest]]:
    """``n`` requests arriving as a Poisson process of ``rate`` per second."""
    rng = np.random.default_rng(seed)
    system = rng.integers(259, 32000, size=SYSTEM_PROMPT_TOKENS).tolist()
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n))
    user_lens = np.clip(rng.lognormal(np.log(400), 0.8, size=n), 16, 6000).astype(int)
    out_lens = np.clip(rng.lognormal(np.log(250), 0.6, size=n), 8, 2000).astype(int)
    out = []
    for i in range(n):
        user = rng.integers(259, 32000, size=user_lens[i]).tolist()
        req = EngineRequest(
            request_id=f"r{i}",
            prompt_token_ids=system + user,
            max_tokens=int(out_lens[i]),
            ignore_eos=i % 5 != 0,
            temperature=0.0 if i % 2 else 0.8,
            seed=i,
        )
        out.append((float(arrivals[i]), req))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=20.0, help="arrivals per second")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    arrivals = workload(args.requests, args.rate, args.seed)
    core = EngineCore(EngineConfig(model="llama-3.1-8b", gpu="h100-sxm"))
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = VirtualDriver(core).run(arrivals)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    stats = result.stats
    out_tokens = result.output_tokens
    decode_steps = [s for s in result.steps if s.kind == "decode"]
    print(f"requests               {len(result.requests):>12,}")
    print(f"steps                  {len(result.steps):>12,}")
    print(f"simulated time         {result.end_s:>12.1f} s")
    print(f"mean running (decode)  {np.mean([s.num_running for s in decode_steps]):>12.1f}")
    print(f"prefix hit rate        {stats.prefix_hit_tokens / stats.prefix_query_tokens:>12.1%}")
    print(f"preemptions            {stats.preemptions:>12,}")
    print(f"wall time              {wall:>12.2f} s   (CPU {cpu:.2f} s)")
    print(f"output tokens / s      {out_tokens / wall:>12,.0f}   (target >= 200,000)")
    print(f"  per CPU second       {out_tokens / cpu:>12,.0f}")
    print(f"prompt tokens / s      {stats.prompt_tokens / wall:>12,.0f}")
    print(f"steps / s              {len(result.steps) / wall:>12,.0f}")


if __name__ == "__main__":
    main()
