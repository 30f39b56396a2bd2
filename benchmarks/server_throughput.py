"""How many streamed tokens per second the embedded server sustains on one core.

The engine runs at time scale 1 with a fixed 20 ms step (the zero-cost model), so every
step should deliver one token to every running stream: N streams → N / 0.02 tokens/s.
The server runs in its own process pinned to one core, the client in this process
pinned to another (when the machine has two), so neither steals the other's CPU or GIL.
For each stream count the script reports the tokens per second the client received, the
server's step lateness (how late each step ended against its schedule; p99 should stay
under 2 ms) and the server's CPU use, and keeps raising the count (×1.5) until the
server falls behind the step rate. It prints two ceilings: the most streams served with
lateness p99 under 2 ms, and the most served while keeping up at all. Lateness also
reflects the machine: on a shared or virtualised host the kernel's timer wake-ups alone
can be milliseconds late (``--nice -10`` shields the server from other processes).

The client is deliberately thin (raw HTTP/1.1 over asyncio streams, counting events in
the bytes) so that it is not what limits the measurement.

    .venv/bin/python benchmarks/server_throughput.py            # 512 streams, then the ceiling
    .venv/bin/python benchmarks/server_throughput.py --streams 512 --no-ceiling --profile
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import multiprocessing as mp
import os
import pstats
import time
from multiprocessing.connection import Connection

from perfmodel.config import EngineConfig
from simengine.embedded import latency_gc, start_server
from simengine.server import EngineServer, ServerOptions

STEP_S = 0.020
PROMPT_TOKENS = 8
EVENT = b"data: {"
LATENESS_LIMIT_S = 0.002
RATE_FLOOR = 0.95


# -- the server process -----------------------------------------------------------------
def _server_process(
    conn: Connection, max_streams: int, core: int | None, profile: bool, nice: int
) -> None:
    if core is not None:
        os.sched_setaffinity(0, {core})
    if nice:
        os.nice(nice)
    profiler = cProfile.Profile() if profile else None
    asyncio.run(_serve(conn, max_streams, profiler))


async def _serve(conn: Connection, max_streams: int, profiler: cProfile.Profile | None) -> None:
    config = EngineConfig(
        fixed_step_s=STEP_S,
        max_num_seqs=max_streams,
        max_num_batched_tokens=max_streams * (PROMPT_TOKENS + 1),
        num_gpu_blocks=max_streams * 64,
        max_model_len=4096,
    )
    server, runner, url = await start_server(config, ServerOptions(), "127.0.0.1", 0)
    with latency_gc():
        await _command_loop(conn, server, profiler, url)
    await runner.cleanup()
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


async def _command_loop(
    conn: Connection, server: EngineServer, profiler: cProfile.Profile | None, url: str
) -> None:
    """Serve the parent's commands: mark the window start, report it, stop."""
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[str] = asyncio.Queue()
    loop.add_reader(conn.fileno(), lambda: commands.put_nowait(conn.recv()))
    conn.send(url)
    marks = (0.0, 0.0)
    while (command := await commands.get()) != "stop":
        if command == "mark":
            server.driver.lateness.clear()
            marks = (time.perf_counter(), time.process_time())
            if profiler is not None:
                profiler.enable()
        elif command == "report":
            if profiler is not None:
                profiler.disable()
            wall, cpu = time.perf_counter() - marks[0], time.process_time() - marks[1]
            conn.send({"lateness": server.driver.lateness_summary(), "cpu_share": cpu / wall})
    loop.remove_reader(conn.fileno())


# -- the client -------------------------------------------------------------------------
class Streams:
    """N raw HTTP/1.1 streaming requests; counts SSE events as the bytes arrive."""

    def __init__(self, host: str, port: int, n: int, max_tokens: int) -> None:
        self.host, self.port, self.n, self.max_tokens = host, port, n, max_tokens
        self.events = 0
        self.started = 0
        self.all_started = asyncio.Event()
        self.writers: list[asyncio.StreamWriter] = []

    async def one(self, i: int) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self.writers.append(writer)
        body = json.dumps(
            {
                "prompt": [300 + i % 1000] * PROMPT_TOKENS,
                "max_tokens": self.max_tokens,
                "ignore_eos": True,
                "stream": True,
            }
        ).encode()
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        tail = b""
        first = True
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                buf = tail + data
                found = buf.count(EVENT)
                tail = buf[-(len(EVENT) - 1) :]
                if found and first:
                    first = False
                    self.started += 1
                    if self.started == self.n:
                        self.all_started.set()
                self.events += found

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


async def measure(url: str, conn: Connection, n: int, window_s: float) -> dict[str, float]:
    """Run ``n`` streams, measure a steady window after every stream has its first token."""
    host, port = url.removeprefix("http://").split(":")
    max_tokens = int((window_s + 10) / STEP_S)
    streams = Streams(host, int(port), n, max_tokens)
    tasks = [asyncio.create_task(streams.one(i)) for i in range(n)]
    try:
        await asyncio.wait_for(streams.all_started.wait(), timeout=30)
        await asyncio.sleep(0.5)  # let the admission burst settle
        conn.send("mark")
        t0, e0 = time.perf_counter(), streams.events
        await asyncio.sleep(window_s)
        e1, t1 = streams.events, time.perf_counter()
        conn.send("report")
        report = await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    finally:
        streams.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    rate = (e1 - e0) / (t1 - t0)
    lateness = report["lateness"]
    return {
        "streams": n,
        "tokens_per_s": rate,
        "expected_per_s": n / STEP_S,
        "lateness_p50_ms": lateness["p50"] * 1e3,
        "lateness_p99_ms": lateness["p99"] * 1e3,
        "lateness_max_ms": lateness["max"] * 1e3,
        "server_cpu_share": report["cpu_share"],
    }


def keeps_up(row: dict[str, float]) -> bool:
    """The server delivers (nearly) one token per stream per step."""
    return row["tokens_per_s"] >= RATE_FLOOR * row["expected_per_s"]


def healthy(row: dict[str, float]) -> bool:
    """Keeps up, and steps end on time (lateness p99 under 2 ms)."""
    return keeps_up(row) and row["lateness_p99_ms"] / 1e3 < LATENESS_LIMIT_S


def _print(row: dict[str, float]) -> None:
    print(
        f"{row['streams']:6d} streams  {row['tokens_per_s']:9.0f} tok/s "
        f"(step rate {row['expected_per_s']:7.0f})  lateness p50 {row['lateness_p50_ms']:.2f} "
        f"p99 {row['lateness_p99_ms']:.2f} max {row['lateness_max_ms']:.2f} ms  "
        f"server CPU {row['server_cpu_share']:.0%}  "
        f"{'ok' if healthy(row) else 'late' if keeps_up(row) else 'BEHIND'}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=512)
    parser.add_argument("--window", type=float, default=5.0, help="seconds measured per level")
    parser.add_argument("--no-ceiling", action="store_true", help="measure --streams only")
    parser.add_argument("--max-streams", type=int, default=4096)
    parser.add_argument("--profile", action="store_true", help="cProfile the server's window")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness change for the server process (e.g. -10 on a shared machine; needs root)",
    )
    args = parser.parse_args()

    cores = sorted(os.sched_getaffinity(0))
    server_core = cores[0] if len(cores) > 1 else None
    if len(cores) > 1:
        os.sched_setaffinity(0, {cores[1]})
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(
        target=_server_process,
        args=(child, args.max_streams, server_core, args.profile, args.nice),
    )
    proc.start()
    url = parent.recv()
    print(
        f"server {url} on core {server_core}, client on core {cores[-1]}; "
        f"step {STEP_S * 1e3:.0f} ms"
    )
    rows = []
    try:
        n = args.streams
        while n <= args.max_streams:
            row = asyncio.run(measure(url, parent, n, args.window))
            rows.append(row)
            _print(row)
            if args.no_ceiling or not keeps_up(row):
                break
            n = int(n * 1.5)
    finally:
        parent.send("stop")
        proc.join(timeout=60)
    if not args.no_ceiling:
        for label, rule in (("lateness p99 < 2 ms", healthy), ("keeping up", keeps_up)):
            good = [r for r in rows if rule(r)]
            top = max(good, key=lambda r: r["streams"], default=None)
            if top is None:
                print(f"ceiling ({label}): none of the levels tried")
            else:
                print(
                    f"ceiling ({label}): {top['streams']} streams, "
                    f"{top['tokens_per_s']:.0f} tokens/s"
                )


if __name__ == "__main__":
    main()
