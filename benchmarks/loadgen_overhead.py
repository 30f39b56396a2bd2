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
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from fixed_costs import bench_cpu, compile_sources, idle_share, startup_cpu
from overhead_clients import (
    LIMITED_CPU_SHARE,
    bare,
    bare_chunks,
    busiest_share,
    cores,
    engine_mean,
    engine_totals,
    loadgen,
    pin,
    start_server,
)
from vllm_bench_serve import vllm_bench_serve

from runfmt.tables import RunTables
from runtime import event_loop
from runtime.quantiles import quantile


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
        "err_p50_ms": quantile(err, 0.5) * 1e3,
        "err_p99_ms": quantile(err, 0.99) * 1e3,
        "client_err_p50_ms": quantile(client_err, 0.5) * 1e3,
        "client_err_p99_ms": quantile(client_err, 0.99) * 1e3,
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
                assert result.ok == streams * args.per_stream, result.section()
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
