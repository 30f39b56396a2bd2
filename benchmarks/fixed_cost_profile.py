"""Where the CPU of a small ``prefillscope bench`` goes: by phase, and its imports by package.

A 16-request ``bench`` (random prompts of 16 tokens, 8 output tokens, 50 req/s) against
an endpoint, as a user runs it, in a fresh interpreter. The command's own CPU is split
at three points — the run directory's ``close`` (journals compacted into parquet), the
summary's write and the process's end — into:

* **start-up**: the interpreter and the imports of the run (aiohttp, numpy, the load
  generator, the probes' parent side);
* **command line**: the CLI (typer, rich, the bench command's flags), its parse and
  validation, up to the run's start;
* **load**: the workload resolved, detection, the smoke request, the plan, the 16
  requests, the probe process's start and stop, and what is imported on the way;
* **close**: compacting the journals (pyarrow, and pandas, which pyarrow's conversions
  import);
* **summary**: the statistics of ``summary.json``;
* **report**: the table printed, the exit;
* **probe process**: the child's CPU (its interpreter, imports, scrapes).

Then a second run under ``-X importtime`` gives each top-level package's share of the
import time (self times summed per package, microseconds of wall on a quiet core: an
attribution, not a CPU figure). The quietest of ``--repeat`` runs is shown.

Run: ``.venv/bin/python benchmarks/fixed_cost_profile.py [--url URL] [--repeat 5]``;
without ``--url`` the SSE mock (``sse_mock.py``) is started for it, on another core.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from fixed_costs import VOCAB, compile_sources
from overhead_clients import cores, start_server

#: The command run in the fresh interpreter: CPU marks at the phase boundaries, printed
#: as JSON on stderr's last line.
PHASES = """
import json, resource, sys, time
def cpu(who=resource.RUSAGE_SELF):
    u = resource.getrusage(who)
    return u.ru_utime + u.ru_stime
marks = {}
from runtime.native_threads import settle_blas_threads
settle_blas_threads()  # as prefillscope.cli.main does, before numpy is imported
import runfmt.rundir as rundir
close = rundir.RunDir.close
def timed_close(self, *a, **k):
    marks.setdefault("load", cpu())
    try:
        return close(self, *a, **k)
    finally:
        marks["close"] = cpu()
rundir.RunDir.close = timed_close
import session.bench_runner as runner
run_bench = runner.run_bench
async def timed_run(*a, **k):
    marks["command line"] = cpu()
    return await run_bench(*a, **k)
runner.run_bench = timed_run
write_summary = runner.write_summary
async def timed_summary(*a, **k):
    try:
        return await write_summary(*a, **k)
    finally:
        marks["summary"] = cpu()
runner.write_summary = timed_summary
marks["start-up"] = cpu()
from prefillscope.cli import main
try:
    main()
except SystemExit as exc:
    if exc.code:
        raise
marks["report"] = cpu()
marks["probe process"] = cpu(resource.RUSAGE_CHILDREN)
print(json.dumps(marks), file=sys.stderr)
"""

ORDER = ("start-up", "command line", "load", "close", "summary", "report")


def bench_argv(url: str, out: Path) -> list[str]:
    return [
        "bench", "--endpoint", url, "--workload", "random", "--num-requests", "16",
        "--rate", "50", "--random-input-len", "16", "--random-output-len", "8",
        "--vocab-size", str(VOCAB), "--gpu-telemetry", "off", "--out", str(out),
        "--no-diagnosis",  # the measurement's cost; the closing diagnosis is an analysis
    ]  # fmt: skip


def phases(url: str) -> dict[str, float]:
    """CPU seconds per phase of one run (each phase's own share, not cumulative)."""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-c", PHASES, *bench_argv(url, Path(tmp) / "run")],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    marks = json.loads(done.stderr.strip().splitlines()[-1])
    out, previous = {}, 0.0
    for name in ORDER:
        out[name] = marks[name] - previous
        previous = marks[name]
    out["probe process"] = marks["probe process"]
    return out


def imports_by_package(url: str) -> Counter[str]:
    """Import time (µs, self times) per top-level package of one run."""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "prefillscope",
             *bench_argv(url, Path(tmp) / "run")],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    totals: Counter[str] = Counter()
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if match:
            totals[match.group(2).split(".")[0]] += int(match.group(1))
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an endpoint (default: the SSE mock, started here)")
    parser.add_argument("--repeat", type=int, default=5, help="runs (the quietest is shown)")
    args = parser.parse_args()
    compile_sources()
    server = None
    url = args.url
    if url is None:
        server, url = start_server(20.0, cores()[1], mock="sse")
    try:
        runs = [phases(url) for _ in range(args.repeat)]
        imports = imports_by_package(url)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
    best = min(runs, key=lambda run: sum(run.values()))
    total = sum(best.values())
    print(f"16-request bench, quietest of {len(runs)}: {total:.3f} CPU-s in all")
    for name, seconds in best.items():
        print(f"  {name:16} {seconds:6.3f} CPU-s  {seconds / total:5.1%}")
    print(f"imports by package (-X importtime self µs, {sum(imports.values()) / 1e3:.0f} ms):")
    for package, micros in imports.most_common(12):
        print(f"  {package:16} {micros / 1e3:6.1f} ms")


if __name__ == "__main__":
    main()
