"""Running ``prefillscope diagnose ab`` in tests and reading what it wrote."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from prefillscope.cli import main
from runfmt.abresult import AbComparison, ABResult
from runfmt.tables import RunTables

#: Condition tolerances for schedules of a second or two on a shared 2-core machine,
#: where other tests' servers compete for the CPU: one send held up by a starved server
#: moves a trial's achieved rate by tens of percent (three scheduled requests: one late
#: send is a third of the evidence), and the embedded engine shares the load generator's
#: process (and GIL), so the client's loop lag follows the engine's work, not the client.
#: These checks are tested on known inputs (``test_ab_verdict``); here they are relaxed
#: so that a busy machine does not refuse the verdicts these tests are about.
TIMING_TOLERANCES = [
    "--tolerance",
    "rate=100",
    "--tolerance",
    "client=1",
    "--tolerance",
    "loop_lag=1",
]
#: The interference pattern of the diagnosis tests (``diagnose_bench.INTERFERENCE``) as
#: flags: four decode streams of 200 tokens, three 8192-token prompts dropped into them
#: (~2.5 s a trial).
INTERFERENCE = [
    "--workload", "interference", "--num-requests", "3", "--rate", "2", "--seed", "3",
    "--set", "concurrency=4", "--set", "stream_requests=1", "--set", "stream_output_len=200",
    "--set", "long_prompt_len=8192", "--gpu-telemetry", "off", "--metrics-interval", "0.1",
    "--resamples", "1000", *TIMING_TOLERANCES,
]  # fmt: skip
#: The prefillscope executable of this environment (for launch templates).
PREFILLSCOPE = Path(sys.executable).with_name("prefillscope")


def diagnose_ab(*args: str | Path) -> tuple[int, str, str]:
    """``prefillscope diagnose ab ARGS`` in this process: exit status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as patch,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.raises(SystemExit) as exit_info,
    ):
        patch.setattr(sys, "argv", ["prefillscope", "diagnose", "ab", *map(str, args)])
        main()
    return int(exit_info.value.code or 0), out.getvalue(), err.getvalue()


def ab_json(*args: str | Path) -> tuple[int, ABResult]:
    """``diagnose ab ARGS --json``: exit status and the document printed (= ``ab.json``),
    read as its types."""
    code, out, err = diagnose_ab(*args, "--json")
    assert out, err
    return code, ABResult.from_json(json.loads(out))


def engine_ran_late(doc: ABResult) -> bool:
    """Whether the A/B's conditions say the embedded engine ran late (its ``engine_pace``
    check failed: the machine, not the modelled engine, shaped a trial's tail). A test of
    the A/B's verdict requires the refusal naming it then, and the verdict otherwise; it
    prints which branch ran."""
    conditions = doc.conditions
    assert conditions is not None
    (pace,) = [c for c in conditions.checks if c.name == "engine_pace"]
    assert pace.matched is not None, pace  # the embedded engine publishes its lateness
    late = pace.matched is False
    branch = "ran late: the refusal is required" if late else "kept its pace: the verdict"
    print(f"engine pace: {branch} ({pace.detail})")
    return late


def assert_refused_for_lateness(code: int, doc: ABResult) -> None:
    """The A/B refused its verdict (exit 1) and its one sentence names the engine pace."""
    verdict = doc.verdict
    assert code == 1 and verdict is not None and verdict.refused, verdict
    assert verdict.winner is None
    assert verdict.sentence.startswith("no verdict: the arms' conditions did not match (")
    assert "engine_pace: the engine" in verdict.sentence, verdict.sentence


def comparison(doc: ABResult, metric: str, arm: str | None = None) -> AbComparison:
    return next(c for c in doc.comparisons if c.metric == metric and arm in (None, c.arm))


def trial_dirs(doc: ABResult) -> list[Path]:
    """Every trial's run directory, in the order the trials ran."""
    trials = [t for arm in doc.arms for t in arm.trials]
    return [Path(t.run_dir) for t in sorted(trials, key=lambda t: t.run_dir)]


def run_json(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run.json").read_text())


def requests(run_dir: Path):
    return RunTables(run_dir).requests


#: A /health server on argv[1]'s port; with argv[2] == "stubborn" it and a child of its
#: own ignore SIGTERM. It prints its own and its child's pid.
STUB = """
import http.server, signal, subprocess, sys
stubborn = sys.argv[2] == "stubborn"
if stubborn:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    if stubborn else "import time; time.sleep(600)"])
print("pids", __import__("os").getpid(), child.pid, flush=True)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def gone(pid: int, within_s: float = 5.0) -> bool:
    """Whether process ``pid`` has ended (a zombie counts as ended)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def pids(log: Path) -> list[int]:
    line = next(x for x in log.read_text().splitlines() if x.startswith("pids "))
    return [int(p) for p in line.split()[1:]]
