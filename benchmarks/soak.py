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
Measured on the shared 2-core machine (issue 43, shared-prefix, 32 streams, 16 tokens):

    requests   before (main at 11a2cbe)       after
    5,000      184.8 MiB                      145.2 MiB
    50,000     326.5 MiB (356.4 in-process)   225.6 MiB

(after: the summary computed a part at a time with exact quantiles, the compaction in two
passes holding one part, pyarrow on the system allocator: ``runtime.arrow_pool``.)
What still grows with the number of requests: the workload's plan, built before the
first send (~0.9 KiB a request: RSS while sending 85 MiB at 5,000, 128 MiB at 50,000,
flat while sending, 0.00-0.02 KiB per row); and at the end ~37 MiB more at 50,000 than at
5,000 (the end adds 60 MiB to the RSS at 5,000, 97 at 50,000), of which the server's
``/metrics`` samples, read whole by the summary's ``server`` section, grow with the run's
duration (+15-25 MiB at 50,000).

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

#: The bench command, which writes its own peak RSS (``VmHWM``: the high-water mark, no
#: sample missed) to the file named by ``$SOAK_HWM`` as it exits.
_HWM = (
    "import atexit, os, pathlib\n"
    "def hwm():\n"
    "    for line in pathlib.Path('/proc/self/status').read_text().splitlines():\n"
    "        if line.startswith('VmHWM:'):\n"
    "            pathlib.Path(os.environ['SOAK_HWM']).write_text(line.split()[1])\n"
    "atexit.register(hwm)\n"
    "from prefillscope.cli import main\n"
    "main()\n"
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
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="soak-")) / "run"
    command = [
        *CLI, "--workload", "shared-prefix", "--num-requests", str(args.requests),
        "--concurrency", str(args.concurrency), "--set", "groups=16", "--set", "prefix_len=256",
        "--set", "suffix_len=32", "--set", "output_len=16", "--engine", "fixed_step_s=0.002",
        "--gpu", "off", "--json", "--out", str(out),
    ]  # fmt: skip
    start = time.monotonic()
    log = out.parent / "stderr.txt"  # progress lines: a pipe nobody reads would fill up
    hwm = out.parent / "peak_rss_kib.txt"
    env = os.environ | {"SOAK_HWM": str(hwm)}
    with log.open("w") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        status = _watch(proc, out, log, args, start)
    if hwm.exists():
        print(
            f"peak RSS of the bench process (VmHWM at exit): {int(hwm.read_text()) / 1024:.1f} MiB"
        )
    return status


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
