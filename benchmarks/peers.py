"""The benchmark of record: the leanest client against every peer, in one run.

The SSE mock (``sse_mock.py``, one token per stream per ``--step-ms`` step) runs pinned to
one core; this process and every client it starts (``peers_clients.py``: the bare reader,
``prefillscope bench`` at ``--workers 1`` and at its default, ``vllm bench serve``,
guidellm, aiperf and inference-perf where installed) to the other. At each stream count
every client streams the same closed-loop load: ``S`` streams, 16 prompt tokens and
``--max-tokens`` output tokens per request, ``--requests`` requests at the largest stream
count and as many per stream at the smaller ones (so every point lasts about as long).

Per client and stream count:

* **µs/token**: CPU of the whole process tree (``RUSAGE_CHILDREN``: the command and every
  process it waited for) less its start-up, over the tokens streamed less the start-up
  run's. **Start-up** is the CPU of the same command with a tiny run (one stream, one
  request of the same length), the quietest of ``--startup-runs``: imports, discovery,
  the first request, writing results; shown in CPU-s. **ratio**: µs/token over the bare
  reader's at the same stream count.
* **TTFT error** (mean, p99): for the clients whose send and read times are known (the
  bare reader, prefillscope) the client's TTFT from its actual send to its first read,
  minus the mock's truth for that request (from reading it whole to writing its first
  token, ``/mock/firsts``); requests are paired with the mock's streams by the tick that
  wrote their first token and, within a tick, in order of sending. For a peer (†) the
  TTFT its own result file reports, mean and p99, minus the mock's mean and p99.
* **ITL error p99**: known reads: each token's gap (a read of n tokens g after the last
  gives each g/n) minus the gap between the ticks that wrote it and the token before
  (``client_limit_sweep.token_errors``), p99 of its size. Peers (†): their reported ITL p99
  minus the p99 of the gaps between the mock's consecutive ticks (vLLM's and
  inference-perf's are over tokens; guidellm's and aiperf's over each request's mean).
* **late**: the TTFT error p99 or the ITL error p99 above a quarter step, the same rule
  for every client; *late from* is the first such stream count. prefillscope's own
  dispatch lag p99 (``summary.json``: how late its sends left) is shown beside it.
* A µs/token below zero (the run cost less CPU than the start-up run it is corrected by:
  a peer whose start-up varies by more than the run's tokens cost) is shown as ``n/a ‡``.
* **mock**: how late the mock's ticks began (p99) and its longest write of a tick, from
  ``/mock/ticks``; a point where half its ticks began a quarter step late measures the
  mock, not the client, and is marked void.

Then the open loop (``--open-rates``): ``prefillscope bench --workers 1 --rate R``, Poisson
arrivals, as many requests as the closed loop's largest point, so that streams start
and end on different ticks instead of all at once; per rate its mean number of streams
open (each request's send to last read, summed, over the span), the same TTFT and ITL
errors, its own dispatch lag and the same *late* rule. It shows the client's error where
the closed loop's lockstep (every stream ends on one tick, and the next S requests go
out in one burst) is not what limits it.

Then the fixed cost: a whole 16-request ``prefillscope bench`` (``fixed_costs.bench_cpu``:
itself and its probe process) and the bare reader's command for 16 requests, best of
``--fixed-runs``. The machine's load average before and after is printed with the table.

Run: ``nice -n 10 .venv/bin/python benchmarks/peers.py [--streams 64,128,256,512]
[--requests 3000] [--max-tokens 100] [--step-ms 20] [--clients bare,w1,...]
[--open-rates 64,128,256] [--out docs/peers.md]``; the peers' side venvs: ``bash
benchmarks/peers_setup.sh``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from client_limit_sweep import token_errors, token_ticks
from fixed_costs import bench_cpu, compile_sources
from overhead_clients import ROOT, cores, pin, start_server
from peers_clients import CLIENTS, OPEN_LOOP, NotRun, Outcome, fixed_bare_cpu

from runtime.quantiles import quantile

TINY = (1, 1)  # (streams, requests) of the start-up run


def mock_record(url: str, path: str, since: float) -> list:
    with urllib.request.urlopen(f"{url}{path}?since={since!r}") as resp:
        record = json.load(resp)
    return record["ticks"] if path == "/mock/ticks" else record


def ttft_errors(outcome: Outcome, starts: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Per request paired with the mock's stream: client TTFT minus the mock's (s)."""
    assert outcome.chunks is not None and outcome.sent is not None
    rows = []
    for rid, reads in outcome.chunks.sort_values("t_s", kind="stable").groupby("request_id"):
        t = reads["t_s"].to_numpy(dtype=float)
        tick = token_ticks(t, reads["n_tokens"].to_numpy(dtype=np.int64), starts)[0]
        rows.append((tick, outcome.sent[rid], t[0]))
    client = pd.DataFrame(rows, columns=["tick", "sent", "first"])
    mock = pd.DataFrame(firsts.reshape(-1, 2), columns=["received", "written"])
    mock["tick"] = np.searchsorted(starts, mock["written"].to_numpy(), side="right") - 1
    by_tick = dict(list(mock.groupby("tick")))
    errors = []
    for tick, mine in client.groupby("tick"):
        theirs = by_tick.get(tick)
        if theirs is None or len(theirs) != len(mine):
            continue  # a request of its own (discovery, a smoke test) shares the tick
        mine, theirs = mine.sort_values("sent"), theirs.sort_values("received")
        truth = theirs["written"].to_numpy() - theirs["received"].to_numpy()
        errors.append(mine["first"].to_numpy() - mine["sent"].to_numpy() - truth)
    return np.concatenate(errors) if errors else np.zeros(0)


def judge(outcome: Outcome, ticks: np.ndarray, firsts: np.ndarray, step_s: float) -> dict:
    """The figures of one run against the mock's record of the same window."""
    starts = ticks[:, 1]
    truth = firsts[:, 1] - firsts[:, 0] if len(firsts) else np.zeros(0)
    row: dict = {"tokens": outcome.tokens, "cpu_s": outcome.cpu_s, "peer": outcome.chunks is None}
    if outcome.chunks is not None:
        _, gap_error = token_errors(outcome.chunks, ticks)
        errors = ttft_errors(outcome, starts, firsts)
        row["ttft_err_mean_ms"] = float(errors.mean()) * 1e3 if errors.size else math.nan
        row["ttft_err_p99_ms"] = quantile(errors, 0.99) * 1e3
        row["ttft_paired"] = int(errors.size)
        row["itl_err_p99_ms"] = quantile(np.abs(gap_error), 0.99) * 1e3
    else:
        rep = outcome.reported
        row["ttft_err_mean_ms"] = rep["ttft_mean_ms"] - float(truth.mean()) * 1e3
        row["ttft_err_p99_ms"] = rep["ttft_p99_ms"] - quantile(truth, 0.99) * 1e3
        consecutive = np.isclose(np.diff(ticks[:, 0]), step_s)  # not across idle spells
        gaps = np.diff(starts)[consecutive]
        row["itl_err_p99_ms"] = rep["itl_p99_ms"] - quantile(gaps, 0.99) * 1e3
    row["truth_ttft_mean_ms"] = float(truth.mean()) * 1e3 if truth.size else math.nan
    row["dispatch_lag_p99_ms"] = outcome.dispatch_lag_p99_ms
    row["workers"] = outcome.workers
    quarter = step_s * 1e3 / 4
    # One rule for every client, against the mock's truth: its own dispatch lag (only
    # prefillscope reports one) is shown beside the verdict, not in it.
    row["late"] = bool(row["ttft_err_p99_ms"] > quarter or row["itl_err_p99_ms"] > quarter)
    delay = ticks[:, 1] - ticks[:, 0]
    row["mock_delay_p99_ms"] = quantile(delay, 0.99) * 1e3
    row["mock_write_max_ms"] = float((ticks[:, 2] - ticks[:, 1]).max()) * 1e3
    row["void"] = bool(quantile(delay, 0.5) > step_s / 4)
    return row


def measure(name: str, url: str, args: argparse.Namespace) -> dict:
    """One client: its start-up, then each stream count; ``not_run`` when it cannot."""
    _, run = CLIENTS[name]
    figures: dict = {"points": {}}
    try:
        tiny = []
        for _ in range(args.startup_runs):
            with tempfile.TemporaryDirectory() as tmp:
                tiny.append(run(url, *TINY, args.max_tokens, Path(tmp)))
        startup = min(tiny, key=lambda o: o.cpu_s)
        figures["startup_cpu_s"] = startup.cpu_s
        for streams in args.streams:
            requests = max(streams, round(args.requests * streams / max(args.streams)))
            since = time.perf_counter()
            with tempfile.TemporaryDirectory() as tmp:
                outcome = run(url, streams, requests, args.max_tokens, Path(tmp))
            ticks = np.asarray(mock_record(url, "/mock/ticks", since), dtype=float).reshape(-1, 4)
            firsts = np.asarray(mock_record(url, "/mock/firsts", since), dtype=float)
            row = judge(outcome, ticks, firsts.reshape(-1, 2), args.step_ms / 1e3)
            row["requests"] = requests
            row["cpu_us_per_token"] = (
                (outcome.cpu_s - startup.cpu_s) / max(1, outcome.tokens - startup.tokens) * 1e6
            )
            figures["points"][streams] = row
    except NotRun as exc:
        figures["not_run"] = str(exc)
    except (RuntimeError, OSError, KeyError, ValueError) as exc:
        figures["not_run"] = f"failed: {exc}"
    return figures


def mean_streams(outcome: Outcome) -> float:
    """Streams open on average: each request's send to its last read, over the span."""
    assert outcome.chunks is not None and outcome.sent is not None
    last = outcome.chunks.groupby("request_id")["t_s"].max()
    sent = outcome.sent.reindex(last.index)
    span = float(last.max() - sent.min())
    return float((last - sent).sum()) / span if span > 0 else math.nan


def open_loop(url: str, args: argparse.Namespace) -> dict:
    """The open-loop points of ``--open-rates``, keyed by rate."""
    _, run = OPEN_LOOP
    points = {}
    for rate in args.open_rates:
        since = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            outcome = run(url, rate, args.requests, args.max_tokens, Path(tmp))
        ticks = np.asarray(mock_record(url, "/mock/ticks", since), dtype=float).reshape(-1, 4)
        firsts = np.asarray(mock_record(url, "/mock/firsts", since), dtype=float)
        row = judge(outcome, ticks, firsts.reshape(-1, 2), args.step_ms / 1e3)
        row["requests"] = args.requests
        row["streams_mean"] = mean_streams(outcome)
        points[rate] = row
    return points


def open_loop_markdown(points: dict) -> list[str]:
    if not points:
        return []
    lines = [
        f"Open loop, `{OPEN_LOOP[0]}` (Poisson arrivals; streams start and end on different "
        "ticks):",
        "",
        "| rate /s | requests | mean streams | TTFT err mean / p99 ms | ITL err p99 ms | late "
        "| own dispatch lag p99 ms | mock late p99 / write max ms |",
        "|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for rate, row in points.items():
        verdict = "void (mock late)" if row["void"] else ("late" if row["late"] else "")
        lag = row.get("dispatch_lag_p99_ms")
        lines.append(
            f"| {rate} | {row['requests']} | {fmt(row['streams_mean'], 0)} | "
            f"{fmt(row['ttft_err_mean_ms'])} / {fmt(row['ttft_err_p99_ms'])} | "
            f"{fmt(row['itl_err_p99_ms'], 2)} | {verdict} | "
            f"{fmt(lag, 1) if lag is not None else '–'} | "
            f"{fmt(row['mock_delay_p99_ms'], 2)} / {fmt(row['mock_write_max_ms'], 2)} |"
        )
    return [*lines, ""]


def machine() -> dict:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown",
    )
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {"cpu": model, "cores": os.cpu_count(), "commit": commit or "unknown"}


def fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def markdown(results: dict, fixed: dict, info: dict, args: argparse.Namespace, opened: dict) -> str:
    streams = args.streams
    lines = [
        "# The clients side by side",
        "",
        "Written by `benchmarks/peers.py` (its docstring defines every column); rerun with "
        "`nice -n 10 .venv/bin/python benchmarks/peers.py` after any change to loadgen/, "
        "with the peers' side venvs made by `bash benchmarks/peers_setup.sh`.",
        "",
        f"- date {info['date']}, commit {info['commit']}, {info['cpu']} ({info['cores']} cores)",
        f"- load average before {info['load_before']}, after {info['load_after']}",
        f"- SSE mock on core {info['server_core']}, clients on core {info['client_core']}; "
        f"step {args.step_ms:g} ms, {args.max_tokens} output tokens per request, "
        f"{args.requests} requests at {max(streams)} streams; one run took "
        f"{info['wall_s']:.0f} s",
        "",
        "| client | streams | requests | µs/token | ratio | start-up CPU-s "
        "| TTFT err mean / p99 ms | ITL err p99 ms | late | own dispatch lag p99 ms "
        "| mock late p99 / write max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    late_from = []
    for name, figures in results.items():
        label = CLIENTS[name][0]
        if "not_run" in figures:
            lines.append(f"| {label} | – | – | not run: {figures['not_run']} | | | | | | | |")
            continue
        first_late = None
        for s, row in figures["points"].items():
            bare = results.get("bare", {}).get("points", {}).get(s)
            ratio = row["cpu_us_per_token"] / bare["cpu_us_per_token"] if bare else math.nan
            dagger = " †" if row["peer"] else ""
            verdict = "void (mock late)" if row["void"] else ("late" if row["late"] else "")
            if row["late"] and not row["void"] and first_late is None:
                first_late = s
            count = row["workers"]
            workers = f" (default: {count} worker{'s' * (count != 1)})" if name == "default" else ""
            per_token = row["cpu_us_per_token"]
            shown = fmt(per_token) if not per_token < 0 else "n/a ‡"
            ratio_shown = fmt(ratio, 2) if not per_token < 0 else "n/a ‡"
            lag = row.get("dispatch_lag_p99_ms")
            lines.append(
                f"| {label}{workers} | {s} | {row['requests']} | {shown} | "
                f"{ratio_shown} | {fmt(figures['startup_cpu_s'], 2)} | "
                f"{fmt(row['ttft_err_mean_ms'])} / {fmt(row['ttft_err_p99_ms'])}{dagger} | "
                f"{fmt(row['itl_err_p99_ms'], 2)}{dagger} | {verdict} | "
                f"{fmt(lag, 1) if lag is not None else '–'} | "
                f"{fmt(row['mock_delay_p99_ms'], 2)} / {fmt(row['mock_write_max_ms'], 2)} |"
            )
        late_from.append(f"{label}: {first_late or f'not late up to {max(streams)}'}")
    lines += [
        "",
        "† from the peer's own result file, against the mock's truth. ‡ the run cost less "
        "CPU than its start-up run: that peer's start-up varies by more than the run costs.",
        "",
    ]
    lines += ["Late from (streams): " + "; ".join(late_from) + ".", ""]
    truth = [
        f"{s}: {fmt(row['truth_ttft_mean_ms'])} ms"
        for s, row in results.get("bare", {}).get("points", {}).items()
    ]
    if truth:
        lines += ["The mock's own mean TTFT (bare reader's runs) at " + ", ".join(truth) + ".", ""]
    lines += open_loop_markdown(opened)
    lines += [
        "Fixed cost, whole command, 16 small requests (best of "
        f"{args.fixed_runs}): `prefillscope bench` {fmt(sum(fixed['bench16']), 2)} CPU-s "
        f"(itself {fmt(fixed['bench16'][0], 2)}, its probe process "
        f"{fmt(fixed['bench16'][1], 2)}); bare reader {fmt(fixed['bare16'], 2)} CPU-s.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="64,128,256,512", help="comma-separated stream counts")
    parser.add_argument("--requests", type=int, default=3000, help="requests at the most streams")
    parser.add_argument("--max-tokens", type=int, default=100, help="output tokens per request")
    parser.add_argument("--step-ms", type=float, default=20.0, help="the mock's step")
    parser.add_argument("--clients", default=",".join(CLIENTS), help=f"of {', '.join(CLIENTS)}")
    parser.add_argument("--startup-runs", type=int, default=2, help="tiny runs (quietest kept)")
    parser.add_argument("--fixed-runs", type=int, default=3, help="16-request runs (best kept)")
    parser.add_argument(
        "--open-rates", default="64,128,256",
        help="arrival rates (/s) of the open-loop points ('' for none)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "peers.md")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    args.streams = [int(s) for s in args.streams.split(",")]
    args.open_rates = [int(r) for r in args.open_rates.split(",") if r]
    names = [n for n in args.clients.split(",") if n]
    unknown = sorted(set(names) - set(CLIENTS))
    if unknown:
        parser.error(f"unknown clients: {', '.join(unknown)}")
    info = machine() | {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    info["load_before"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    wall0 = time.perf_counter()
    info["client_core"], info["server_core"] = cores()
    proc, url = start_server(args.step_ms, info["server_core"], mock="sse")
    try:
        pin(info["client_core"])  # every client command inherits it
        compile_sources()
        results = {name: measure(name, url, args) for name in names}
        opened = open_loop(url, args)
        with tempfile.TemporaryDirectory() as tmp:
            bare16 = [fixed_bare_cpu(url, Path(tmp)) for _ in range(args.fixed_runs)]
        bench16 = min((bench_cpu(url, 16) for _ in range(args.fixed_runs)), key=sum)
    finally:
        proc.terminate()
        proc.wait()
    info["wall_s"] = time.perf_counter() - wall0
    info["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    fixed = {"bench16": list(bench16), "bare16": min(bare16)}
    text = markdown(results, fixed, info, args, opened)
    args.out.write_text(text)
    print(text)
    if args.json:
        figures = {"info": info, "clients": results, "fixed": fixed, "open_loop": opened}
        args.json.write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
