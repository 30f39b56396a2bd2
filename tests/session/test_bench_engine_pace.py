"""A bench run whose engine ran late: its step lateness in ``summary.json`` and on screen.

The embedded engine's steps are held on its loop (``server_support.held_steps``: 30 ms of
wall time against a modelled 2 ms step), as a starved machine holds them, so every step
ends at least 28 ms late whatever the machine's load. The lateness the engine published
must reach ``summary.json``'s server section through the probes, typed, and bench's
end-of-run view must say the engine ran late; the same run with its steps on time says
nothing of it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from bench_support import bench
from rich.console import Console
from server_support import fast_config, held_steps

from prefillscope.summary_view import summary_renderable
from probes.engine_pace import engine_pace
from runfmt.names import SUMMARY_JSON
from runfmt.run import open_run
from simengine.embedded import EmbeddedServer
from simengine.metrics import STEP_KINDS

WORKLOAD = {
    "groups": 2,
    "prefix_len": 64,
    "suffix_len": 16,
    "output_len": 8,
    "num_requests": 6,
    "arrival": "constant",
    "rate": 20,
}


def _screen(run: Path) -> str:
    opened = open_run(run)
    assert opened.summary is not None
    console = Console(width=120, file=io.StringIO(), color_system=None)
    console.print(summary_renderable(opened.summary, run, "complete", None, 120))
    return " ".join(console.file.getvalue().split())


def test_the_engine_s_step_lateness_reaches_summary_json_and_the_screen(tmp_path):
    run = tmp_path / "late"
    with EmbeddedServer(fast_config()) as server, held_steps(server, 0.03, STEP_KINDS):
        outcome = bench(
            "shared-prefix", run, endpoint=server.url, overrides=WORKLOAD, metrics_interval_s=0.1
        )
        assert server.server is not None
        steps = len(server.server.driver.lateness)
    assert outcome.status == "complete"
    written = json.loads((run / SUMMARY_JSON).read_text())["server"]["step_lateness_s"]
    assert written["unit"] == "s" and written["provenance"] == "derived"
    assert written["source"] == "prefillscope_engine_step_lateness_seconds"
    # every step the run made was held (the smoke test's before the first scrape)
    assert 8 <= written["count"] <= steps
    assert written["mean"] >= 0.028 and written["p50"] >= 0.02
    summary = open_run(run).summary
    assert summary is not None and summary.server is not None
    assert summary.server.step_lateness_s is not None
    assert summary.server.step_lateness_s.count == written["count"]  # read back typed
    pace = engine_pace(summary)
    assert pace is not None and pace.late()
    screen = _screen(run)
    assert f"The engine ran late: {pace.text()}, beyond 20%" in screen


def test_an_engine_on_time_publishes_its_lateness_and_the_screen_says_nothing(tmp_path):
    run = tmp_path / "on-time"
    with EmbeddedServer(fast_config(fixed_step_s=0.02)) as server:
        outcome = bench(
            "shared-prefix", run, endpoint=server.url, overrides=WORKLOAD, metrics_interval_s=0.1
        )
        assert server.server is not None
        # the machine's own lateness, unplanted: whatever it was, the screen follows it
        measured = list(server.server.driver.lateness)
    assert outcome.status == "complete" and measured
    summary = open_run(run).summary
    assert summary is not None
    pace = engine_pace(summary)
    assert pace is not None and pace.itl_p99_s is not None
    screen = _screen(run)
    assert ("The engine ran late" in screen) == pace.late()
