"""Soak: a long ``prefillscope bench`` against the embedded engine, watching memory and rows.

Runs the real command (a subprocess) for ``--requests`` requests (default 10,000) of a
short shared-prefix workload in a closed loop, and every ``--every`` seconds prints the
resident memory (RSS, from ``/proc``) of the bench process and of its child processes
(the embedded engine, the probe process) and the rows its requests journal holds. At the
end it prints rows written vs requests sent (every request sent must have its row) and
how RSS moved while requests were being sent (from a quarter of them on): a client or
an engine that keeps something per request grows linearly; a flat line is what should
be seen.

    .venv/bin/python benchmarks/soak.py                      # 10,000 requests
    .venv/bin/python benchmarks/soak.py --requests 3000      # shorter, same checks

The last line is the bench process's peak RSS (``VmHWM``, written by the process itself
as it exits: no sample missed), which the end of a run sets: compaction, then the summary.
Before it, each metered phase of the end (``PHASES``) with its own peak, wall and CPU
seconds, and the end's increment: the peak less the level during the run (the peak
before the compaction: the plan and the sending).

A whole bench's end lands on a heap the run has shaped (what the plan and the sending
freed is reused), and a run's length on the wall clock varies with the machine's load
(the server's samples grow with it). ``--replay DIR`` measures the end alone and the same
every time: in a fresh process, on a copy of run directory ``DIR``, the compaction from
its journals and then the bench's own summary step, each table's parquet and
``summary.json`` written anew (compare them with ``cmp``).

Measured on the shared 2-core machine (issue 43, shared-prefix, 32 streams, 16 tokens,
``--seed 7``; MiB; load 5-10). Whole bench, peak (level during the run, the end's
increment); main run from its own tree (the ``-c`` child imports from the working
directory first):

    requests             main at aa5c0f9            18f987e
    5,000                144.2 (86.8, +57.4)        138.3 (85.8, +52.4)
    50,000               233.5 (137.1, +96.4)       187.4 (132.8, +54.6)
    5,000 --percentiles  148.7 (85.9, +62.8)        140.2 (86.2, +54.0)
    50,000 --percentiles 332.3 (135.5, +196.8)      195.1 (132.8, +62.3)

``--replay`` of the same run directories (what the end adds to a fresh process's RSS;
the summary.json and parquet files aa5c0f9 and 18f987e write are identical, ``cmp``):

    run                  main at aa5c0f9   18f987e
    5,000                +66.5             +62.0
    50,000 (244 s run)   +123.2            +76.0
    50,000 (334 s run)   +129.3            +77.9

(18f987e: the server's ``/metrics`` samples resolved a scrape at a time, vLLM's extra
percentiles in the summary's own passes, glibc's ``mmap`` threshold held at 128 KiB
(``runtime.arrow_pool``), the plan the oracle annotated replacing the original; before
it: the summary a part at a time with exact quantiles, the compaction in two passes
holding one part, pyarrow on the system allocator.) The summary step alone (fresh
process, 50,000 requests, alternated with main at load 4-5): 2.1-3.6 CPU s against
main's 1.9-3.1; the held threshold is 0.1-0.4 s of it (each large buffer mapped anew).

The workload's plan held by column (``workloads.packed``: ~86 B a request, against
~570 B as ``RequestSpec`` objects and a second copy while the oracle annotated it; the
sender reads each request when it sends it), same machine, ``--seed 7``, peak (level
during the run, the end's increment), MiB; RSS while sending in brackets:

    requests   before (18f987e)                 plan by column (3403aac)
    5,000      139.9 (87.1, +52.7) [~85]        137.0 (84.0, +53.0) [~82]
    50,000     184.7 (132.9, +51.8) [~126]      149.9 (91.4, +58.5) [~88]

The level during the run now grows 7.4 MiB from 5,000 to 50,000 requests (the plan's
columns are 4.1 MiB of it at 50,000), against 45.8 before. What still grows: the end,
+53.0 at 5,000 against +58.5 at 50,000 — no longer absorbed by a heap the plan freed —
the compaction's peak and the summary's (the server series itself: a frame row and
each histogram per scrape, 2.9 MiB for 615 scrapes; the allocator's fragmentation over
more parts).

Parquet tables read a row group at a time (``runfmt.tables``: pyarrow's ``iter_batches``
read ahead, its buffers growing with the file), same machine and seed, one run each,
load 3-5, peak (level, the end's increment), MiB:

    requests   before (65b82b9)          row group at a time (47b4247)
    5,000      134.9 (83.1, +51.8)       136.8 (83.3, +53.5)
    50,000     154.7 (91.9, +62.8)       145.3 (91.0, +54.3)

The end's increment no longer grows with the run (+0.8 MiB from 5,000 to 50,000, against
+11.0): the summary's client figures added 14.0 MiB at 50,000, now 5.9. What the end
adds is the compaction's: pyarrow and pyarrow.parquet imported there (27.0 + 8.8 MiB)
and what converting and writing the first table leaves (~17 MiB, in a fresh process the
same for both runs: ``--replay``).

Linux only (``/proc``). Exit status 1 when rows are missing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The bench command, run with a meter: each phase of the run's end (below) gets its own
#: peak RSS, exactly — the kernel's high-water mark (``VmHWM``) is reset as a phase starts
#: (``/proc/self/clear_refs``: 5) and read as it ends, and a phase's peak is carried to
#: the phases around it — plus its wall and CPU seconds; the process's peak over the
#: whole run is written to ``$SOAK_HWM`` as it exits, the phases to ``$SOAK_PHASES``.
_HWM = (
    "import atexit, functools, importlib, inspect, json, os, pathlib, time\n"
    "STATUS = pathlib.Path('/proc/self/status')\n"
    "def kib(key):\n"
    "    for line in STATUS.read_text().splitlines():\n"
    "        if line.startswith(key):\n"
    "            return int(line.split()[1])\n"
    "PEAK = [0]\n"
    "STACK = []\n"
    "PHASES = []\n"
    "def enter():\n"
    "    seen = kib('VmHWM:')\n"
    "    PEAK[0] = max(PEAK[0], seen)\n"
    "    if STACK:\n"
    "        STACK[-1][0] = max(STACK[-1][0], seen)\n"
    "    pathlib.Path('/proc/self/clear_refs').write_text('5')\n"
    "    STACK.append([0, kib('VmRSS:'), PEAK[0], time.monotonic(), time.process_time()])\n"
    "def leave(name):\n"
    "    peak, rss, before, wall, cpu = STACK.pop()\n"
    "    peak = max(peak, kib('VmHWM:'))\n"
    "    PEAK[0] = max(PEAK[0], peak)\n"
    "    if STACK:\n"
    "        STACK[-1][0] = max(STACK[-1][0], peak)\n"
    "    PHASES.append({'phase': name, 'depth': len(STACK), 'rss_in_kib': rss,\n"
    "                   'peak_before_kib': before,\n"
    "                   'peak_kib': peak, 'rss_out_kib': kib('VmRSS:'),\n"
    "                   'wall_s': time.monotonic() - wall, 'cpu_s': time.process_time() - cpu})\n"
    "def meter(spec, name):\n"
    "    module, _, attr = spec.partition(':')\n"
    "    owner = importlib.import_module(module)\n"
    "    *path, last = attr.split('.')\n"
    "    for part in path:\n"
    "        owner = getattr(owner, part)\n"
    "    fn = getattr(owner, last)\n"
    "    if inspect.iscoroutinefunction(fn):\n"
    "        async def wrapped(*a, **k):\n"
    "            enter()\n"
    "            try:\n"
    "                return await fn(*a, **k)\n"
    "            finally:\n"
    "                leave(name)\n"
    "    else:\n"
    "        def wrapped(*a, **k):\n"
    "            enter()\n"
    "            try:\n"
    "                return fn(*a, **k)\n"
    "            finally:\n"
    "                leave(name)\n"
    "    setattr(owner, last, functools.wraps(fn)(wrapped))\n"
    "for spec, name in json.loads(os.environ['SOAK_METER']):\n"
    "    meter(spec, name)\n"
    "def hwm():\n"
    "    PEAK[0] = max(PEAK[0], kib('VmHWM:'))\n"
    "    pathlib.Path(os.environ['SOAK_HWM']).write_text(str(PEAK[0]))\n"
    "    pathlib.Path(os.environ['SOAK_PHASES']).write_text(json.dumps(PHASES))\n"
    "atexit.register(hwm)\n"
    "from prefillscope.cli import main\n"
    "main()\n"
)
#: The phases metered (``module:attribute``, where the caller looks it up), in the order
#: of a run's end: the plan is built before the first send; the tables are compacted when
#: the run closes; then the summary, whose parts are metered inside it.
PHASES = (
    ("session.bench_runner:build_bench_plan", "workload plan"),
    ("runfmt.rundir:RunDir.close", "compaction"),
    ("session.bench_runner:write_summary", "summary"),
    ("probes.latency:summarize_frames", "client figures"),  # --percentiles' too
    ("probes.timeline:server_series", "server series"),
    ("probes.server_summary:server_summary", "server section"),
)
CLI = [sys.executable, "-c", _HWM, "bench"]


def rss_mb(pid: int) -> float:
    """Resident memory of one process in MiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def journal_rows(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    except OSError:
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--seed", type=int, default=None, help="the workload's seed")
    parser.add_argument(
        "--percentiles", action="store_true", help="ask for vLLM's extra percentiles too"
    )
    parser.add_argument("--out", type=Path, default=None, help="run directory (default: a new one)")
    parser.add_argument(
        "--replay", type=Path, default=None, metavar="DIR", help="replay the end of run DIR"
    )
    args = parser.parse_args()
    if args.replay is not None:
        return replay(args.replay, args.percentiles)
    out = args.out or Path(tempfile.mkdtemp(prefix="soak-")) / "run"
    out.parent.mkdir(parents=True, exist_ok=True)
    extra = ["--seed", str(args.seed)] if args.seed is not None else []
    if args.percentiles:
        extra += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99"]
    command = [
        *CLI, "--workload", "shared-prefix", "--num-requests", str(args.requests),
        "--concurrency", str(args.concurrency), "--set", "groups=16", "--set", "prefix_len=256",
        "--set", "suffix_len=32", "--set", "output_len=16", "--engine", "fixed_step_s=0.002",
        "--gpu", "off", "--json", "--out", str(out), *extra,
    ]  # fmt: skip
    start = time.monotonic()
    log = out.parent / "stderr.txt"  # progress lines: a pipe nobody reads would fill up
    hwm = out.parent / "peak_rss_kib.txt"
    phases = out.parent / "phases.json"
    env = os.environ | {
        "SOAK_HWM": str(hwm),
        "SOAK_PHASES": str(phases),
        "SOAK_METER": json.dumps(PHASES),
    }
    with log.open("w") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        status = _watch(proc, out, log, args, start)
    if phases.exists():
        _print_phases(json.loads(phases.read_text()), int(hwm.read_text()))
    if hwm.exists():
        print(
            f"peak RSS of the bench process (VmHWM at exit): {int(hwm.read_text()) / 1024:.1f} MiB"
        )
    return status


#: The end of a bench replayed in a fresh process (``--replay``): its arguments are the run
#: directory, the copy to write, and whether vLLM's extra percentiles are asked for.
_REPLAY = (
    "import asyncio, pathlib, shutil, sys, time\n"
    "from runtime.arrow_pool import settle_arrow_pool\n"
    "settle_arrow_pool()\n"
    "from loadgen.load_options import LoadResult\n"
    "from runfmt.run import Run\n"
    "from runfmt.rundir import RunDir\n"
    "from runtime.clock import RunClock\n"
    "from session.bench_options import BenchOptions\n"
    "from session.bench_summary import write_summary\n"
    "STATUS = pathlib.Path('/proc/self/status')\n"
    "def mib(key):\n"
    "    return next(int(l.split()[1]) / 1024 for l in STATUS.read_text().splitlines()\n"
    "                if l.startswith(key))\n"
    "src, dst, picked = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]\n"
    "shutil.copytree(src, dst)\n"
    "for made in (*dst.glob('*.parquet'), dst / 'summary.json'):\n"
    "    made.unlink(missing_ok=True)\n"
    "metrics = (('ttft', 'tpot', 'itl', 'e2el'), (50.0, 90.0, 99.0))\n"
    "options = BenchOptions('replay', percentiles=metrics if picked == '1' else None)\n"
    "info = Run.at(dst).info\n"
    "level = mib('VmRSS:')\n"
    "pathlib.Path('/proc/self/clear_refs').write_text('5')\n"
    "wall, cpu = time.monotonic(), time.process_time()\n"
    "run = RunDir(dst)\n"
    "for journal in sorted(dst.glob('*.jsonl')):  # runfmt.names.journal_file\n"
    "    run.compact(journal.stem)\n"
    "compacted = mib('VmHWM:')\n"
    "asyncio.run(write_summary(run, info, LoadResult(), options, None, RunClock()))\n"
    "print(f'RSS before the end {level:.1f} MiB; peak: compaction {compacted:.1f}, '\n"
    "      f'with the summary {mib(\"VmHWM:\"):.1f} MiB: the end adds '\n"
    "      f'{mib(\"VmHWM:\") - level:.1f} MiB in {time.monotonic() - wall:.2f} s '\n"
    "      f'({time.process_time() - cpu:.2f} CPU s); written to {dst}')\n"
)


def replay(run: Path, percentiles: bool) -> int:
    """The end of run ``run`` (compaction, then the summary) in a fresh process, on a copy."""
    copy = Path(tempfile.mkdtemp(prefix="soak-replay-")) / "run"
    done = subprocess.run(
        [sys.executable, "-c", _REPLAY, str(run), str(copy), "1" if percentiles else "0"],
        check=False,
    )
    return done.returncode


def _print_phases(phases: list[dict[str, float]], peak_kib: int) -> None:
    """Each metered phase's peak RSS, in the order they ended, and the end of the run's
    increment: the peak less the peak before the compaction (the level during the run,
    the plan and the sending)."""
    print(f"\n{'phase':<22} {'RSS in':>8} {'peak':>8} {'RSS out':>8} {'wall s':>7} {'CPU s':>7}")
    for p in phases:
        name = "  " * int(p["depth"]) + str(p["phase"])
        print(
            f"{name:<22} {p['rss_in_kib'] / 1024:8.1f} {p['peak_kib'] / 1024:8.1f} "
            f"{p['rss_out_kib'] / 1024:8.1f} {p['wall_s']:7.2f} {p['cpu_s']:7.2f}"
        )
    closing = next((p for p in phases if p["phase"] == "compaction"), None)
    if closing is not None:
        level = closing["peak_before_kib"] / 1024
        print(
            f"level during the run (peak before the compaction) {level:.1f} MiB; "
            f"the end adds {peak_kib / 1024 - level:.1f} MiB"
        )


def _watch(
    proc: subprocess.Popen[str], out: Path, log: Path, args: argparse.Namespace, start: float
) -> int:
    samples: list[tuple[float, float, float, int]] = []
    print(f"{'t (s)':>7} {'bench RSS (MiB)':>16} {'children RSS (MiB)':>19} {'rows written':>13}")
    while proc.poll() is None:
        time.sleep(args.every)
        kids = sum(rss_mb(c) for c in children(proc.pid))
        row = (
            time.monotonic() - start,
            rss_mb(proc.pid),
            kids,
            journal_rows(out / "requests.jsonl"),
        )
        if row[1]:
            samples.append(row)
            print(f"{row[0]:7.0f} {row[1]:16.1f} {row[2]:19.1f} {row[3]:13,}", flush=True)
    stdout, _ = proc.communicate()
    stderr = log.read_text()
    wall = time.monotonic() - start
    summary = json.loads(stdout) if stdout.strip().startswith("{") else {}
    rows = journal_rows(out / "requests.jsonl")
    counts = summary.get("requests", {})
    print(f"\nbench exit {proc.returncode} after {wall:.0f} s; run directory {out}")
    if stderr.strip():
        print("stderr:", stderr.strip().splitlines()[-1])
    print(f"requests sent {args.requests:,}; rows written {rows:,}; summary counts {counts}")
    # While requests are sent (after the first quarter): the end of the run (compaction,
    # the summary) allocates once and is not growth per request.
    steady = [s for s in samples if args.requests // 4 <= s[3] < args.requests]
    if len(steady) >= 2:
        first, last = steady[0], steady[-1]
        per_row = (last[1] - first[1]) * 1024 / max(1, last[3] - first[3])
        print(
            f"RSS while sending, from {first[3]:,} to {last[3]:,} rows: bench "
            f"{first[1]:.1f} → {last[1]:.1f} MiB ({per_row:.2f} KiB per row), "
            f"children {first[2]:.1f} → {last[2]:.1f} MiB"
        )
    if samples:
        print(f"peak RSS: bench {max(s[1] for s in samples):.1f} MiB (the end of the run "
              f"included), children {max(s[2] for s in samples):.1f} MiB")  # fmt: skip
    return 0 if rows == args.requests and proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
