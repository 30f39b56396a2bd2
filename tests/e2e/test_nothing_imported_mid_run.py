"""A bench run imports nothing while it measures.

An import on the run's event loop stalls every stream at once (numpy's first quantile
imports ``numpy.ma``: ~15 ms, more where bytecode is not cached) and shows as dispatch lag
and ITL that the server did not cause. A whole ``bench`` against the embedded engine runs
in a child interpreter whose audit hook notes every import made between the start and
the end of ``LoadRun.run`` (the measured phase, the live dashboard ticking beside it);
there must be none. What the run needs is imported before its clock starts, and what only
its end needs (pandas for the tables and the summary) after.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sys
measuring, imported = [False], []
def note(event, args):
    if event == "import" and measuring[0]:
        imported.append(args[0])
sys.addaudithook(note)
from loadgen.run import LoadRun
measure = LoadRun.run
async def measured(self):
    measuring[0] = True
    try:
        return await measure(self)
    finally:
        measuring[0] = False
LoadRun.run = measured
from prefillscope.cli import main
sys.argv = ["prefillscope", "bench", "--workload", "system-prompt", "--num-requests", "12",
            "--rate", "20", "--gpu-telemetry", "off", "--out", sys.argv[1]]
try:
    main()
except SystemExit as exit:
    assert not exit.code, exit.code
print(json.dumps(sorted(set(imported))), file=sys.stderr)
"""


def test_a_bench_run_imports_nothing_while_it_measures(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "run")],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    imported = json.loads(done.stderr.strip().splitlines()[-1])
    assert imported == [], f"imported during the measured phase: {imported}"
    assert (tmp_path / "run" / "summary.json").exists()
