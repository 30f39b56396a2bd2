"""The load generator's fixed costs, for ``loadgen_overhead.py``.

Start-up (a fresh interpreter: imports, detection, one request), the CPU of a whole
16-request ``prefillscope bench`` command split into its own process and its probe
process, and the client's CPU share while idle between two requests far apart.
"""

from __future__ import annotations

import compileall
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from overhead_clients import ROOT, VOCAB

from loadgen.load_options import LoadOptions
from loadgen.run import run_load
from loadgen.target import Target
from runfmt.rundir import RunDir
from runfmt.tables import RunTables
from runtime.clock import RunClock
from workloads.plan import Plan, Prompt, RequestSpec

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
             "--gpu-telemetry", "off", "--out", str(Path(tmp) / "run"), "--no-diagnosis"],
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
