"""The clients ``loadgen_overhead.py`` and ``client_limit_sweep.py`` run side by side.

The server they stream from (the embedded engine at a fixed step, or the light SSE mock),
its own TTFT/ITL totals that stand as truth, the bare aiohttp reader (the floor for a
Python client) and the load generator's run in one process or in ``bench --workers``'
worker processes, each with its CPU seconds.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
import pandas as pd
from bare_reader import read_streams

from loadgen.load_options import LoadOptions
from loadgen.run import run_load
from loadgen.target import Target
from runfmt.rundir import RunDir
from runtime.clock import RunClock
from session.live_stats import LiveStats
from session.shards import split_plan
from session.workers import worker_pool
from workloads.plan import Plan, Prompt, RequestSpec

ROOT = Path(__file__).resolve().parent.parent
PROMPT_LEN = 16
VOCAB = 32000
#: A client process at this share of a core or more is CPU-bound.
LIMITED_CPU_SHARE = 0.9


def pin(core: int | None) -> None:
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})


def cores() -> tuple[int | None, int | None]:
    """(client core, server core): different cores when there are two."""
    if not hasattr(os, "sched_getaffinity"):
        return None, None
    mine = sorted(os.sched_getaffinity(0))
    return (mine[0], mine[1]) if len(mine) >= 2 else (None, None)


def start_server(
    step_ms: float, core: int | None, mock: str = "engine"
) -> tuple[subprocess.Popen, str]:
    """The server streamed from: the embedded engine, or (``mock="sse"``) the light SSE
    mock (``sse_mock.py``), which keeps its step at thousands of streams on one core."""
    command = [
        str(ROOT / ".venv" / "bin" / "prefillscope"),
        "serve",
        "--port", "0",
        "--fixed-step-ms", str(step_ms),
        "--max-num-seqs", "1024",
        "--max-num-batched-tokens", "16384",
        "--json",
    ]  # fmt: skip
    if mock == "sse":
        command = [
            sys.executable,
            str(ROOT / "benchmarks" / "sse_mock.py"),
            "--step-ms",
            str(step_ms),
        ]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: pin(core)) if core is not None else None,
    )
    assert proc.stdout is not None
    info = json.loads(proc.stdout.readline())
    return proc, info["url"]


def body(max_tokens: int, i: int) -> dict:
    return {
        "model": "llama-3.1-8b",
        "prompt": [1000 + (i * 7 + k) % 20000 for k in range(PROMPT_LEN)],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": True,
        "temperature": 0.0,
    }


#: The engine's own histograms the clients' means are set against: its time from a
#: request's arrival to its first token, and between tokens.
ENGINE_HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
}


async def engine_totals(url: str) -> dict[str, tuple[float, float]]:
    """(sum, count) so far of each of ``ENGINE_HISTOGRAMS``: the engine's ``/metrics``, or
    the SSE mock's own ``/mock/totals`` (the same two figures, NaN where neither has them)."""
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/mock/totals") as resp:
            if resp.status == 200:
                mock = await resp.json()
                return {key: (float(mock[key][0]), float(mock[key][1])) for key in mock}
        async with session.get(url + "/metrics") as resp:
            text = await resp.text()
    totals = {}
    for key, metric in ENGINE_HISTOGRAMS.items():
        values = []
        for part in ("sum", "count"):
            match = re.search(rf"^{metric}_{part}{{[^}}]*}} (\S+)", text, re.M)
            values.append(float(match.group(1)) if match else float("nan"))
        totals[key] = (values[0], values[1])
    return totals


def engine_mean(before: dict, after: dict, key: str) -> float:
    """The engine's mean of one histogram over what happened between two scrapes."""
    (sum0, count0), (sum1, count1) = before[key], after[key]
    return (sum1 - sum0) / max(1.0, count1 - count0)


async def bare(url: str, streams: int, per_stream: int, max_tokens: int) -> tuple[list, int]:
    """The floor (``bare_reader.read_streams``, in this process): read each stream, one
    timestamp per read, events counted per read; each request's send time (just before
    its POST) is kept for its TTFT."""
    encoded = [json.dumps(body(max_tokens, i)).encode() for i in range(streams * per_stream)]
    reads = await read_streams(url, encoded, streams)
    return reads, streams * per_stream * max_tokens


def bare_chunks(reads: list, max_tokens: int) -> pd.DataFrame:
    """The bare reader's reads as chunk rows (request, t_s, n_tokens), like ``chunks``.

    A read's token events are its events but the role/usage/[DONE] ones: the last read
    carries what is left of ``max_tokens``.
    """
    frames = []
    for request, (_, times, events) in enumerate(reads):
        n = np.asarray(events, dtype=np.int64)
        tokens = n.copy()
        tokens[-1] = max(0, max_tokens - int(n[:-1].sum()))
        keep = tokens > 0
        frames.append(
            pd.DataFrame(
                {"request_id": request, "t_s": np.asarray(times)[keep], "n_tokens": tokens[keep]}
            )
        )
    return pd.concat(frames, ignore_index=True)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def loadgen(
    url: str,
    streams: int,
    per_stream: int,
    max_tokens: int,
    out: Path,
    workers: int = 1,
    clock: RunClock | None = None,
):
    """The load generator's run (in ``workers`` processes when more than 1, on ``clock``,
    a new one when None); returns its result, run directory, CPU seconds and the
    workers' start-up CPU seconds (each).

    The CPU is counted up to the end of the run: compacting the journals into parquet
    afterwards (``RunDir.close``) happens once the measurement is over.
    """
    cpu0, children0 = time.process_time(), children_cpu()
    specs = [
        RequestSpec(f"r{i}", Prompt.of_tokens(body(max_tokens, i)["prompt"]), max_tokens)
        for i in range(streams * per_stream)
    ]
    target = Target(url, "embedded", "completions", "llama-3.1-8b", vocab_size=VOCAB)
    run_dir = RunDir(out, create=True)
    plan = Plan("overhead", 0, specs, concurrency=streams)
    clock = clock or RunClock()
    startup = 0.0
    if workers == 1:
        result = await run_load(plan, target, run_dir, clock, LoadOptions())
        cpu = time.process_time() - cpu0
    else:
        shards = split_plan(plan, workers)
        stats = LiveStats(clock, total=len(plan))
        pool = await worker_pool(shards, plan, target, (run_dir, clock, stats), LoadOptions())
        result = await pool.run()
        loops = sum(s.client.cpu_s or 0.0 for s in result.shards)
        cpu = time.process_time() - cpu0 + loops
        startup = (children_cpu() - children0 - loops) / len(shards)
    run_dir.close()
    return result, run_dir, cpu, startup


def busiest_share(result, cpu: float, wall: float) -> float:
    """The busiest client process's share of a core over the run."""
    shares = [s.client.cpu_share or 0.0 for s in result.shards]
    return max(shares) if shares else (result.client.cpu_share or cpu / wall)
