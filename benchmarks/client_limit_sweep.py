"""Where each client becomes the bottleneck: streams swept against a mock on its own core.

The light SSE mock (``sse_mock.py``: one token per stream per step, thousands of streams
on one core) is pinned to core 0; each client runs on the cores given to it (by default
the bare reader and one prefillscope process on core 1, 2 and 4 workers on cores 0,1:
on a 2-core machine a second worker can only share the mock's core; the bare reader on
asyncio's own loop, prefillscope on the loop its command runs, uvloop where installed).
For each number
of concurrent streams, every client streams the same closed-loop requests, and the
table says whether it was *limited*:

* **busy**: its busiest process at ``LIMITED_CPU_SHARE`` of a core or more (a worker
  process's event loop, ``LoadResult.shards[*].client.cpu_share``; the bare reader's
  whole process), or
* **late**: the p99 of its per-token gap error above a quarter of the step (the rule
  of ``loadgen_overhead.py``), against the mock's own record of when it wrote each
  token: a stream's k-th token was written in its first tick + k − 1 (the first tick
  is the latest one consistent with every read of the stream: a read at ``t`` of ``c``
  tokens means token ``c`` was written in a tick that started by ``t``), so a token's
  true gap is the time between the starts of its tick and the one before, and the
  client's is the time since its previous read over the tokens of the read.

Also shown: the tokens' *lateness* (a read's time minus the end of the tick that
wrote it, 0 when read before that end, so the mock's own time to write every stream of
a tick is not charged to the client). The mock writes every stream's token at once,
as an engine step does, so a client reads a tick's tokens one after the other: the last
read of a tick waits for all the others, and p99 lateness grows with the streams long
before the client is saturated. It bounds the error of absolute times (TTFT, E2E), not
of the gaps, since the order of reads repeats from tick to tick.

On a machine shared with other jobs, a client is late because the other jobs hold its
core as much as for its own work. ``--rt`` (root) runs the mock and the clients at
real-time priority (``SCHED_FIFO``, the mock above the clients), so that they run the
moment they are ready: a client is then late for its own reasons. The kernel still
keeps 5 % of each core for the other jobs, and a client at real-time priority that
saturates its core holds it for the whole point, so keep such runs short.

``--slices K`` gives the mock a core of its own *and* each client process one: on a
2-core machine there is no third core, so the other core is cut into K slices of 1/K of
it by the kernel's CFS bandwidth control (``cpu_slices.py``, root), and every client
process (the bare reader, one prefillscope process, each of N ≤ K workers, the parent
sharing slice 0 with the first worker) runs in a slice of its own: a machine whose
client cores are K times slower. *busy* is then judged against the slice. Clients in
slices run at ordinary priority (CFS bandwidth does not limit real-time processes);
with ``--rt`` the mock alone is real-time.

A point is void when the mock itself fell behind (half its ticks began more than a
quarter step after they were due): that measures the mock, not the client. A late tick
now and then (a busy core) delays every stream alike and is not charged to the client.
The mock's time to write one tick (``write``) is shown beside it. The machine's
load average is printed with each point: on a shared machine other jobs take cores too.

Run: ``.venv/bin/python benchmarks/client_limit_sweep.py [--streams 256,512,...,4096]
[--step-ms 50] [--tokens 100] [--per-stream 1] [--rounds 1] [--clients bare,w1,w2,w4]
[--cores "w2=1"] [--rt] [--slices 2] [--json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np
import pandas as pd
from cpu_slices import CpuSlices, place_workers, unavailable
from overhead_clients import LIMITED_CPU_SHARE, bare, bare_chunks, busiest_share, loadgen

from probes.latency import summarize
from runfmt.summary_sections import ClientSection
from runfmt.tables import RunTables
from runtime import event_loop
from runtime.clock import RunClock
from runtime.quantiles import quantile

HERE = Path(__file__).resolve().parent
#: Where each client runs by default: (cores, prefillscope processes; 0 = the bare reader).
CLIENTS = {"bare": ("1", 0), "w1": ("1", 1), "w2": ("0,1", 2), "w4": ("0,1", 4)}
#: ``--rt``: the mock's real-time priority, above the clients' (a worker sharing the
#: mock's core runs when the mock does not).
MOCK_RT_PRIORITY, CLIENT_RT_PRIORITY = 20, 10
#: The rules a client is limited by, each with its first stream count in the report: the
#: benchmark's (busy or late) and each half of it, and summary.json's ``client.limited``
#: (dispatch lag p99 or the busiest loop's sustained CPU; none for the bare reader).
RULES = {"busy or late": "limited", "busy": "busy", "late": "late", "summary": "summary_limited"}


def cpu_set(text: str) -> set[int]:
    return {int(c) for c in text.split(",") if c}


def realtime(priority: int) -> None:
    """SCHED_FIFO at ``priority`` for this process and what it starts (needs root)."""
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))


def start_mock(step_ms: float, core: int, rt: bool) -> tuple[subprocess.Popen, str]:
    def place() -> None:
        os.sched_setaffinity(0, {core})
        if rt:
            realtime(MOCK_RT_PRIORITY)

    proc = subprocess.Popen(
        [sys.executable, str(HERE / "sse_mock.py"), "--step-ms", str(step_ms)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=place,
    )
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())["url"]


async def mock_ticks(url: str, since: float) -> np.ndarray:
    """The mock's ticks since ``since``: rows (due, start, end, streams)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/mock/ticks", params={"since": repr(since)}) as resp,
    ):
        ticks = (await resp.json())["ticks"]
    return np.asarray(ticks, dtype=float).reshape(-1, 4)


def token_ticks(t: np.ndarray, n: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The tick (index into ``starts``) that wrote each token of one stream whose reads
    came at ``t`` with ``n`` tokens each: token k in its first tick + k − 1, the first
    tick being the latest one consistent with every read (a read at ``t`` of ``c``
    tokens in all means token ``c`` was written in a tick that started by ``t``)."""
    count = np.cumsum(n)
    latest = np.searchsorted(starts, t, side="right") - 1
    first = int((latest - count + 1).min())
    return first + np.arange(int(count[-1]))


def token_errors(chunks: pd.DataFrame, ticks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per token, against the mock's record: its lateness (the read's time minus the end
    of the tick that wrote it, 0 when read before that end) and its gap error (the gap
    the client gives it, a read of n tokens g after the previous read giving each g/n,
    minus the time between the starts of its tick and the one before; first tokens
    have no gap)."""
    starts, ends = ticks[:, 1], ticks[:, 2]
    late, gap_error = [], []
    for _, reads in chunks.sort_values("t_s", kind="stable").groupby("request_id", sort=False):
        t = reads["t_s"].to_numpy(dtype=float)
        n = reads["n_tokens"].to_numpy(dtype=np.int64)
        tick = np.clip(token_ticks(t, n, starts), 0, len(ends) - 1)
        read_at = np.repeat(t, n)
        late.append(np.maximum(0.0, read_at - ends[tick]))
        given = np.repeat(np.diff(t, prepend=np.nan) / n, n)
        error = given - (starts[tick] - starts[np.maximum(tick - 1, 0)])
        gap_error.append(error[n[0] :])
    if not late:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(late), np.concatenate(gap_error)


async def one_point(url: str, name: str, streams: int, args: argparse.Namespace) -> dict:
    cores, workers = args.clients[name]
    os.sched_setaffinity(0, cpu_set(cores))  # the workers inherit it
    slices: CpuSlices | None = args.slices
    if slices is not None:  # this process in slice 0, each worker in a slice of its own
        slices.place(os.getpid(), 0)
        placer = place_workers(slices, workers) if workers > 1 else None
        throttled0 = slices.throttled_s()
    since = time.perf_counter()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    health: ClientSection | None = None
    if workers == 0:
        reads, tokens = await bare(url, streams, args.per_stream, args.tokens)
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        share, chunks = cpu / wall, bare_chunks(reads, args.tokens)
    else:
        clock = RunClock()
        with tempfile.TemporaryDirectory() as tmp:
            result, run_dir, cpu, _ = await loadgen(
                url, streams, args.per_stream, args.tokens, Path(tmp) / "run", workers, clock
            )
            wall = time.perf_counter() - wall0
            assert result.ok == streams * args.per_stream, result.section()
            tables = RunTables(run_dir)
            tokens = int(tables.requests["output_tokens"].sum())
            chunks = tables.chunks
            health = summarize(run_dir).client  # the project's own verdict
        chunks["t_s"] += clock.t0  # run time back to perf_counter, the mock's clock
        share = busiest_share(result, cpu, wall)
    capacity, throttled = 1.0, 0.0
    if slices is not None:
        slices.release(os.getpid())
        capacity, throttled = slices.capacity, slices.throttled_s() - throttled0
        if placer is not None:
            placer.join()
            assert len(placer.placed) == workers, f"{len(placer.placed)} of {workers} placed"
    ticks = await mock_ticks(url, since)
    late, gap_error = token_errors(chunks, ticks)
    step_s = args.step_ms / 1e3
    mock_delay = ticks[:, 1] - ticks[:, 0]  # how late its ticks began
    span = chunks["t_s"].max() - chunks["t_s"].min()
    row = {
        "cores": cores,
        "workers": workers,
        "tokens": tokens,
        "tokens_per_s": tokens / span,
        "cpu_us_per_token": cpu / tokens * 1e6,
        "busiest_cpu_share": share,
        "capacity": capacity,
        "throttled_s": throttled,
        "gap_error_p50_ms": quantile(np.abs(gap_error), 0.5) * 1e3,
        "gap_error_p99_ms": quantile(np.abs(gap_error), 0.99) * 1e3,
        "late_p50_ms": quantile(late, 0.5) * 1e3,
        "late_p99_ms": quantile(late, 0.99) * 1e3,
        "mock_delay_p50_ms": quantile(mock_delay, 0.5) * 1e3,
        "mock_delay_p99_ms": quantile(mock_delay, 0.99) * 1e3,
        "mock_write_p50_ms": quantile(ticks[:, 2] - ticks[:, 1], 0.5) * 1e3,
        "mock_streams_max": int(ticks[:, 3].max()),
        "load_average_1m": os.getloadavg()[0],
    }
    row["busy"] = bool(share >= LIMITED_CPU_SHARE * capacity)
    row["late"] = bool(row["gap_error_p99_ms"] > step_s * 1e3 / 4)
    row["limited"] = row["busy"] or row["late"]
    row["summary_limited"] = health.limited if health else None  # summary.json's client
    row["summary_reasons"] = list(health.reasons) if health else None
    row["void"] = bool(row["mock_delay_p50_ms"] > step_s * 1e3 / 4)
    return row


def report(results: dict[int, dict[str, dict]], args: argparse.Namespace) -> dict:
    print(
        f"mock on core {args.mock_core}, step {args.step_ms:g} ms, {args.tokens} tokens/stream, "
        f"{'real-time priority' if args.rt else 'ordinary priority'}"
        + (" (the mock only)" if args.rt and args.slices else "")
    )
    if args.slices:
        print(
            f"clients in slices of {1 / args.slices.count:.2f} of a core, one per process; "
            "'busiest' is the busiest process's share of its slice"
        )
    print(f"{'streams':>7} {'client':>6} {'cores':>5} {'tok/s':>8} {'µs/tok':>7} {'busiest':>7} "
          f"{'gap err p50/p99':>16} {'late p50/p99':>16} {'mock p50/p99':>14} {'write':>6} "
          f"{'load':>5}")  # fmt: skip
    first: dict[str, dict[str, int | None]] = {name: dict.fromkeys(RULES) for name in args.clients}
    for streams, rows in results.items():
        for name, r in rows.items():
            verdict = "void (mock late)" if r["void"] else ("limited" if r["limited"] else "")
            why = [k for k in ("busy", "late") if r[k]]
            if r["summary_limited"]:
                why.append("summary.json: " + "; ".join(r["summary_reasons"]))
            notes = f" ({', '.join(why)})" if why and not r["void"] else ""
            print(
                f"{streams:>7} {name:>6} {r['cores']:>5} {r['tokens_per_s']:>8.0f} "
                f"{r['cpu_us_per_token']:>7.1f} {r['busiest_cpu_share'] / r['capacity']:>7.2f} "
                f"{r['gap_error_p50_ms']:>7.2f}/{r['gap_error_p99_ms']:<7.2f}ms "
                f"{r['late_p50_ms']:>7.2f}/{r['late_p99_ms']:<7.2f}ms "
                f"{r['mock_delay_p50_ms']:>5.1f}/{r['mock_delay_p99_ms']:<5.1f}ms "
                f"{r['mock_write_p50_ms']:>4.1f}ms {r['load_average_1m']:>5.1f} "
                f"{verdict}{notes}"
            )
            for rule, key in RULES.items():
                if r[key] and not r["void"] and first[name][rule] is None:
                    first[name][rule] = streams
    for name, by_rule in first.items():
        at = [f"{n or f'> {max(results)}'} streams ({rule})" for rule, n in by_rule.items()]
        print(f"{name}: client-limited from {', '.join(at)}")
    return first


def slices_for(parser: argparse.ArgumentParser, args: argparse.Namespace) -> CpuSlices | None:
    """``--slices K``: every client on the core the mock is not on, one slice of it per
    process (``cpu_slices``), so that the mock keeps a core of its own and each client
    process has a (slower) core of its own too."""
    if not args.slices:
        return None
    why = unavailable()
    if why:
        parser.error(f"--slices: {why}")
    others = sorted(os.sched_getaffinity(0) - {args.mock_core})
    if not others:
        parser.error("--slices: no core besides the mock's (--mock-core)")
    for name, (_, workers) in args.clients.items():
        if workers > args.slices:
            parser.error(f"--slices {args.slices}: client {name} has {workers} processes")
        args.clients[name] = (str(others[0]), workers)
    return CpuSlices(args.slices)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="256,512,1024,1536,2048,3072,4096")
    parser.add_argument("--step-ms", type=float, default=50.0)
    parser.add_argument("--tokens", type=int, default=100, help="output tokens per request")
    parser.add_argument("--per-stream", type=int, default=1, help="requests per stream")
    parser.add_argument("--clients", default="bare,w1,w2,w4", help=f"of {', '.join(CLIENTS)}")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per point (quietest kept)")
    parser.add_argument("--mock-core", type=int, default=0)
    parser.add_argument(
        "--cores", default="", help='NAME=CORES;... to place a client elsewhere ("w2=1")'
    )
    parser.add_argument(
        "--rt", action="store_true", help="mock and clients at real-time priority (root)"
    )
    parser.add_argument(
        "--slices", type=int, default=0,
        help="K: every client on the other core, cut into K slices of 1/K, one per process",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    places = dict(CLIENTS)
    for item in (i for i in args.cores.split(";") if i):
        name, _, cores = item.partition("=")
        places[name] = (cores, places[name][1])
    args.clients = {name: places[name] for name in args.clients.split(",")}
    args.slices = slices_for(parser, args)
    if args.rt:
        try:  # the mock is started at real-time priority: say so now if that is not allowed
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(CLIENT_RT_PRIORITY))
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        except PermissionError:
            parser.error("--rt needs root (or CAP_SYS_NICE)")
    proc, url = start_mock(args.step_ms, args.mock_core, args.rt)
    if args.rt and args.slices is None:
        realtime(CLIENT_RT_PRIORITY)  # the worker processes inherit it
    results: dict[int, dict[str, dict]] = {}
    try:
        for streams in (int(s) for s in args.streams.split(",")):
            rows: dict[str, dict] = {}
            for name in list(args.clients) * args.rounds:
                runner = asyncio.run if args.clients[name][1] == 0 else event_loop.run
                row = runner(one_point(url, name, streams, args))  # prefillscope's loop: uvloop
                if name not in rows or row["gap_error_p99_ms"] < rows[name]["gap_error_p99_ms"]:
                    rows[name] = row  # the quietest round: the machine is shared
            results[streams] = rows
    finally:
        proc.terminate()
        proc.wait()
        if args.slices is not None:
            args.slices.close()
    first = report(results, args)
    if args.json:
        print(json.dumps({"streams": results, "limited_from": first}))


if __name__ == "__main__":
    main()
