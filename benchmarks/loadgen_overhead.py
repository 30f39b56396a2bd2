"""What the load generator costs the client, next to a bare aiohttp reader in the same run.

The embedded engine runs in its own process (``prefillscope serve --fixed-step-ms``: a
zero-cost model whose every step takes exactly that long, one token per stream per
step), pinned to one core; the client runs here, pinned to another. For each number of
concurrent streams, two closed-loop clients stream the same requests:

* **bare**: aiohttp ``iter_any()`` reads with one ``perf_counter`` per read, nothing else
  (events per read counted with ``bytes.count``) — the floor for a Python client;
* **loadgen**: ``run_load`` with everything on: SSE parsing, token counts, error
  classification, records and chunk times written to a run directory, the client
  monitor;
* **wN** (``--workers 2,4``): the same plan through ``bench --workers N``'s worker
  processes (``session.workers``), journals merged, the live statistics fed.

Figures per client: CPU microseconds per streamed token (process CPU / tokens), and the
inter-token latency error: per-token gaps (a read of n tokens after g gives n gaps of
g/n) minus the engine's step time, as p50/p99 of the absolute error, plus the client's
mean ITL against the engine's own ``vllm:inter_token_latency_seconds`` mean, and the TTFT
error: the client's mean time from sending a request to reading its first token, minus
the engine's own mean ``vllm:time_to_first_token_seconds`` (arrival to first token) over
the same requests — what the network, the HTTP stack and the client's loop add (NaN
against the SSE mock, which keeps no metrics). Then the
load generator's start-up CPU (a fresh interpreter: imports, session, one request) and
its CPU share while idle between two requests far apart.

Targets: loadgen ≤ 1.2× bare CPU per token; ITL p99 error < 1 ms at 512 streams;
start-up < 1 CPU-second; ~0 CPU while idle.

A client is *limited* at a stream count when it is busy (its busiest process at
``LIMITED_CPU_SHARE`` of a core or more) or late (its ``client err`` p99 above a quarter
of the step); the table ends with the first stream count at which each client was. CPU
of worker processes is their event loops' (``LoadResult.client``, start-up excluded) plus
the parent's; their start-up is shown per worker. ``bench 16`` is the whole command's CPU
for a 16-request run (imports, plan, probes, parquet, summary), split into its own
process and its probe process (``--bench16-only``: that figure alone), the quietest
of five. The project's modules are byte-compiled first, as any second run of a command
finds them (``PYTHONDONTWRITEBYTECODE=1``, set on some CI machines, would otherwise
charge every run ~0.1 CPU-s of compiling them).
When vLLM is installed, ``vllm bench serve`` streams the same kind of requests at the
fewest streams, once (``vllm_bench_serve.py``; ``--no-vllm`` skips it).

Reading the figures: CPU time here is charged by the kernel per scheduler tick, so short
runs are noisy (each client runs ``--rounds`` times and its quietest round is kept), and
on some virtual machines a thread that only sleeps is charged a few milliseconds per
wake-up (``time.sleep(0.25)`` alone shows ~1.5 ms): the idle share is an upper bound.
The engine's own step jitter (GC, a busy core) shows in every stream at once; the
``client err`` columns remove it by comparing each stream's gap with the other streams'
gap over the same two engine steps.

``--mock sse`` streams from the light SSE mock (``sse_mock.py``) instead of the engine:
it keeps its step far beyond the engine's few hundred streams, and its own TTFT and ITL
totals stand for the engine's histograms. The stream count at which each client becomes
limited with the mock on a core of its own, swept: ``client_limit_sweep.py``.

Both clients run on the event loop the CLI runs on (``runtime.event_loop``: uvloop where
installed); ``PREFILLSCOPE_EVENT_LOOP=asyncio`` runs both on asyncio's, the loop a bare
reader usually gets.

Run: ``.venv/bin/python benchmarks/loadgen_overhead.py [--streams 64,512] [--tokens 100]
[--step-ms 50] [--rounds 2] [--mock engine|sse] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np
import pandas as pd
from vllm_bench_serve import vllm_bench_serve

from loadgen.load_options import LoadOptions
from loadgen.run import run_load
from loadgen.target import Target
from runfmt.rundir import RunDir
from runfmt.tables import RunTables
from runtime import event_loop
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
    """The floor: read each stream, one timestamp per read, events counted per read;
    each request's send time (just before its POST) is kept for its TTFT."""
    encoded = [json.dumps(body(max_tokens, i)).encode() for i in range(streams * per_stream)]
    headers = {"Content-Type": "application/json"}
    reads: list[tuple[float, list[float], list[int]]] = []
    queue = iter(encoded)

    async def user(session: aiohttp.ClientSession) -> None:
        for data in queue:
            times: list[float] = []
            events: list[int] = []
            sent = time.perf_counter()
            async with session.post(url + "/v1/completions", data=data, headers=headers) as r:
                async for chunk in r.content.iter_any():
                    times.append(time.perf_counter())
                    events.append(chunk.count(b"\n\n"))
            reads.append((sent, times, events))

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(user(session) for _ in range(streams)))
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
        loops = sum(s["client"].get("cpu_s") or 0.0 for s in result.shards)
        cpu = time.process_time() - cpu0 + loops
        startup = (children_cpu() - children0 - loops) / len(shards)
    run_dir.close()
    return result, run_dir, cpu, startup


def busiest_share(result, cpu: float, wall: float) -> float:
    """The busiest client process's share of a core over the run."""
    shares = [(s["client"] or {}).get("cpu_share") or 0.0 for s in result.shards]
    return max(shares) if shares else (result.client.get("cpu_share") or cpu / wall)


def itl_figures(chunks: pd.DataFrame, step_s: float) -> dict:
    """Per-token gaps and their error: against the step time, and against the engine's step.

    The engine emits one token to every stream each step, so arrivals cluster by step
    (a cluster ends at a silence longer than half a step). Every stream's gap between
    the same two steps should be the same: the median over streams is the engine's gap
    (its own jitter included) and a stream's difference from it is what the client
    added. ``err`` is against the nominal step (engine jitter included), ``client_err``
    against the step's median.
    """
    chunks = chunks.sort_values("t_s", kind="stable").reset_index(drop=True)
    t = chunks["t_s"].to_numpy()
    chunks["step"] = np.concatenate([[0], np.cumsum(np.diff(t) > step_s / 2)])
    chunks = chunks.sort_values(["request_id", "t_s"], kind="stable")
    same = chunks["request_id"].to_numpy()[1:] == chunks["request_id"].to_numpy()[:-1]
    n = chunks["n_tokens"].to_numpy()[1:][same]
    gap = np.diff(chunks["t_s"].to_numpy())[same] / n
    steps = chunks["step"].to_numpy()
    pairs = pd.DataFrame({"gap": gap, "a": steps[:-1][same], "b": steps[1:][same]})
    engine = pairs.groupby(["a", "b"])["gap"].transform("median")
    gaps = np.repeat(gap, n)
    err = np.abs(gaps - step_s)
    client_err = np.repeat(np.abs(gap - engine.to_numpy()), n)
    return {
        "gaps": int(gaps.size),
        "mean_itl_ms": float(gaps.mean() * 1e3),
        "err_p50_ms": float(np.percentile(err, 50) * 1e3),
        "err_p99_ms": float(np.percentile(err, 99) * 1e3),
        "client_err_p50_ms": float(np.percentile(client_err, 50) * 1e3),
        "client_err_p99_ms": float(np.percentile(client_err, 99) * 1e3),
    }


def client_names(args: argparse.Namespace) -> list[str]:
    workers = [f"w{n}" for n in (int(w) for w in args.workers.split(",") if w) if n > 1]
    return ["bare", "loadgen", *workers]


async def measure(url: str, streams: int, args: argparse.Namespace, step_s: float) -> dict:
    figures: dict[str, dict] = {}
    for name in client_names(args) * args.rounds:
        engine_before = await engine_totals(url)
        cpu0, wall0, startup = time.process_time(), time.perf_counter(), 0.0
        if name == "bare":
            reads, tokens = await bare(url, streams, args.per_stream, args.tokens)
            cpu = time.process_time() - cpu0
            share = cpu / (time.perf_counter() - wall0)
            chunks = bare_chunks(reads, args.tokens)
            ttft = float(np.mean([times[0] - sent for sent, times, _ in reads if times]))
        else:
            workers = 1 if name == "loadgen" else int(name[1:])
            with tempfile.TemporaryDirectory() as tmp:
                result, run_dir, cpu, startup = await loadgen(
                    url, streams, args.per_stream, args.tokens, Path(tmp) / "run", workers
                )
                assert result.ok == streams * args.per_stream, result.to_json()
                requests = RunTables(run_dir).requests
                tokens = int(requests["output_tokens"].sum())
                ttft = float((requests["first_token_s"] - requests["sent_s"]).mean())
                chunks = RunTables(run_dir).chunks
            share = busiest_share(result, cpu, time.perf_counter() - wall0)
        engine_after = await engine_totals(url)
        row = {"cpu_us_per_token": cpu / tokens * 1e6, "tokens": tokens, "cpu_share": share}
        row["startup_cpu_s"] = startup
        row |= itl_figures(chunks, step_s)
        row["engine_mean_itl_ms"] = engine_mean(engine_before, engine_after, "itl") * 1e3
        row["mean_ttft_ms"] = ttft * 1e3
        row["engine_mean_ttft_ms"] = engine_mean(engine_before, engine_after, "ttft") * 1e3
        row["ttft_err_ms"] = row["mean_ttft_ms"] - row["engine_mean_ttft_ms"]
        late = row["client_err_p99_ms"] > step_s * 1e3 / 4
        row["limited"] = bool(share >= LIMITED_CPU_SHARE or late)
        best = figures.get(name)
        if best is None or row["cpu_us_per_token"] < best["cpu_us_per_token"]:
            figures[name] = row  # the quietest round: machines are shared
    figures["ratio"] = {
        "cpu": figures["loadgen"]["cpu_us_per_token"] / figures["bare"]["cpu_us_per_token"]
    }
    return figures


STARTUP = """
import sys, tempfile
from runtime import event_loop
from runtime.clock import RunClock
from probes.detect import detect_target
from loadgen.run import run_load
from runfmt.rundir import RunDir
from workloads.plan import Plan, Prompt, RequestSpec

async def main():
    target = await detect_target(sys.argv[1], vocab_size=32000)
    plan = Plan("startup", 0, [RequestSpec("r0", Prompt.of_tokens([300] * 16), 1)], concurrency=1)
    run_dir = RunDir(tempfile.mkdtemp(), create=True)
    result = await run_load(plan, target, run_dir, RunClock())
    assert result.ok == 1

event_loop.run(main())
"""


def startup_cpu(url: str) -> float:
    """CPU seconds of a fresh interpreter: imports, detection, one request recorded.

    Compacting the run directory into parquet (pandas) belongs to the end of a run.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", STARTUP, url], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


#: ``prefillscope bench`` in a fresh interpreter that says its own CPU and its children's
#: (the probe process) on its last stderr line.
BENCH_CPU = """
import json, resource, sys
from prefillscope.cli import main
try:
    main()
except SystemExit as exc:
    if exc.code:
        raise
usages = (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
print(json.dumps([u.ru_utime + u.ru_stime for u in usages]), file=sys.stderr)
"""


#: The project's packages (``pyproject.toml``'s ``packages.find``).
PACKAGES = ("workloads", "loadgen", "probes", "diagnose", "simengine", "perfmodel", "runtime",
            "runfmt", "session", "prefillscope")  # fmt: skip


def compile_sources() -> None:
    """Byte-compile the project's modules, as the first run of any command does."""
    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=1)


def bench_cpu(url: str, requests: int) -> tuple[float, float]:
    """CPU seconds of a whole ``prefillscope bench`` command sending ``requests`` small
    requests at 50/s with ``/metrics`` scraped: (its own process, the children it waits
    for: the probe process)."""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-c", BENCH_CPU, "bench", "--endpoint", url,
             "--workload", "random", "--num-requests", str(requests), "--rate", "50",
             "--random-input-len", "16", "--random-output-len", "8", "--vocab-size", str(VOCAB),
             "--gpu-telemetry", "off", "--out", str(Path(tmp) / "run")],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    parent, children = json.loads(done.stderr.strip().splitlines()[-1])
    return parent, children


async def idle_share(url: str, gap_s: float) -> float:
    """Client CPU share between a request's end and the next one, ``gap_s`` later."""
    specs = [
        RequestSpec(f"r{i}", Prompt.of_tokens([300] * 16), 2, intended_s=i * gap_s)
        for i in range(2)
    ]
    target = Target(url, "embedded", "completions", "llama-3.1-8b", vocab_size=VOCAB)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = RunDir(Path(tmp) / "run", create=True)
        result = await run_load(
            Plan("idle", 0, specs), target, run_dir, RunClock(), LoadOptions(health_interval_s=0.25)
        )
        requests = RunTables(run_dir).requests.sort_values("intended_s")
        client = RunTables(run_dir).client
        run_dir.close()
    start = requests["end_s"].iloc[0] + 0.3
    end = result.schedule_t0_s + gap_s - 0.05
    inside = client[(client["t_s"] > start) & (client["t_s"] < end)]
    return float(inside["cpu_share"].mean())


def report(results: dict, step_ms: float, startup: float, idle: float) -> None:
    print(f"{'streams':>7} {'client':>8} {'µs/token':>9} {'gaps':>7} {'mean ITL':>9} "
          f"{'engine ITL':>10} {'err p50/p99 vs step':>20} {'client err p50/p99':>19} "
          f"{'TTFT err':>9} {'CPU share':>9} {'start-up':>8}")  # fmt: skip
    limited_at: dict[str, int | None] = {}
    for streams, figures in results.items():
        for name in (n for n in figures if n != "ratio"):
            f = figures[name]
            mark = "  limited" if f["limited"] else ""
            print(
                f"{streams:>7} {name:>8} {f['cpu_us_per_token']:>9.1f} {f['gaps']:>7} "
                f"{f['mean_itl_ms']:>7.2f}ms {f['engine_mean_itl_ms']:>8.2f}ms "
                f"{f['err_p50_ms']:>9.3f}/{f['err_p99_ms']:<7.3f}ms "
                f"{f['client_err_p50_ms']:>9.3f}/{f['client_err_p99_ms']:<7.3f}ms "
                f"{f['ttft_err_ms']:>+7.2f}ms {f['cpu_share']:>9.2f} "
                f"{f['startup_cpu_s']:>7.2f}s{mark}"
            )
            limited_at.setdefault(name, None)
            if f["limited"] and limited_at[name] is None:
                limited_at[name] = streams
        print(f"{'':>7} {'ratio':>8} {figures['ratio']['cpu']:>9.2f}  (target ≤ 1.2)")
        lagging = figures["bare"]["engine_mean_itl_ms"] > 1.05 * step_ms
        if lagging:
            print(
                f"{'':>7} the engine could not keep its {step_ms:g} ms step: use a longer --step-ms"
            )
    for name, streams in limited_at.items():
        print(f"{name}: client-limited from {streams} streams" if streams else
              f"{name}: not client-limited up to {max(results)} streams")  # fmt: skip
    print(f"start-up: {startup:.2f} CPU-s (target < 1)")
    print(f"idle: {idle:.4f} of a core between two requests (target ~0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="64,512", help="comma-separated stream counts")
    parser.add_argument("--tokens", type=int, default=100, help="output tokens per request")
    parser.add_argument("--per-stream", type=int, default=2, help="requests per stream")
    parser.add_argument(
        "--step-ms", type=float, default=50.0, help="engine step time (it must keep up with it)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds per client (best kept)")
    parser.add_argument("--idle-s", type=float, default=3.0, help="idle gap measured")
    parser.add_argument("--workers", default="2,4", help="worker counts to add (besides 1)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--bench16-only", action="store_true", help="only the 16-request command's CPU"
    )
    parser.add_argument("--no-vllm", action="store_true", help="skip vllm bench serve")
    parser.add_argument(
        "--mock", choices=("engine", "sse"), default="engine",
        help="stream from the embedded engine or the light SSE mock (its own TTFT/ITL truth)",
    )  # fmt: skip
    args = parser.parse_args()
    client_core, server_core = cores()
    proc, url = start_server(args.step_ms, server_core, args.mock)
    try:
        pin(client_core)
        compile_sources()
        bench16 = [bench_cpu(url, 16) for _ in range(5)]
        if not args.bench16_only:
            startup = startup_cpu(url)
            step_s = args.step_ms / 1e3
            results = {}
            for streams in (int(s) for s in args.streams.split(",")):
                results[streams] = event_loop.run(measure(url, streams, args, step_s))
            idle = event_loop.run(idle_share(url, args.idle_s))
            first = min(results)  # vLLM's start-up is heavy: once, at the fewest streams
            vllm = (
                None
                if args.no_vllm
                else vllm_bench_serve(url, first, first * args.per_stream, args.tokens)
            )
    finally:
        proc.terminate()
        proc.wait()
    loop = "asyncio" if event_loop.loop_factory() is None else "uvloop"
    print(
        f"client core {client_core}, server core {server_core}, step {args.step_ms} ms, "
        f"{loop} event loop (both clients; {event_loop.LOOP_ENV}=asyncio for asyncio's)"
    )
    if not args.bench16_only:
        report(results, args.step_ms, startup, idle)
        if vllm is None:
            print("vllm bench serve: skipped (--no-vllm, or no vLLM install found)")
        else:
            print(
                f"vllm bench serve, {first} streams: {vllm['cpu_us_per_token']:.1f} µs/token, "
                f"start-up {vllm['startup_cpu_s']:.2f} CPU-s, mean TTFT "
                f"{vllm['mean_ttft_ms']:.2f} ms, mean ITL {vllm['mean_itl_ms']:.2f} ms "
                f"(step {args.step_ms:g} ms), ITL p99 {vllm['p99_itl_ms']:.2f} ms, "
                f"{vllm['failed']} failed"
            )
    parent, children = min(bench16, key=sum)
    median = float(np.median([sum(run) for run in bench16]))
    print(
        f"bench 16: {parent + children:.2f} CPU-s for a whole 16-request bench command "
        f"(itself {parent:.2f}, its probe process {children:.2f}; quietest of 5, median "
        f"{median:.2f}; target < 1)"
    )
    if args.json:
        figures = {"bench16_cpu_s": {"self": parent, "children": children}}
        if not args.bench16_only:
            figures |= {"streams": results, "startup_cpu_s": startup, "idle_share": idle}
            figures["vllm_bench_serve"] = vllm
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
