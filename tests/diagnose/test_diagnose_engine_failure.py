"""A hard failure on a real run: the server dies mid-run, the decision contains it.

An embedded engine serves the interference workload and is stopped a second in; bench
records an interrupted run (streams cut, connections refused, everything finished
kept). The diagnosis works on what was kept and calls for bounded containment.
"""

from __future__ import annotations

import threading

from diagnose_bench import INTERFERENCE, bench

from diagnose.checklist import run_checklist, write_diagnosis
from diagnose.context import DiagnoseOptions
from perfmodel.config import EngineConfig
from runfmt.rundir import RunDir
from simengine.embedded import EmbeddedServer


def test_a_server_killed_mid_run_gets_a_bounded_containment(tmp_path):
    server = EmbeddedServer(EngineConfig(max_num_batched_tokens=2048)).start()
    killer = threading.Timer(1.0, server.stop)
    killer.start()
    try:
        run_dir = bench(
            tmp_path / "killed",
            "interference",
            INTERFERENCE | {"num_requests": 6},
            endpoint=server.url,
            vocab_size=32000,
        )
    finally:
        killer.cancel()
        server.stop()
    assert RunDir(run_dir).read_json("run.json")["status"] == "interrupted"
    diagnosis = run_checklist(run_dir, DiagnoseOptions(resamples=400))
    decision = diagnosis.decision
    assert decision.hard_failure
    assert decision.reasons[0].startswith("the run was interrupted: server at")
    assert decision.recommendation.startswith("Hard failure: contain now")
    assert "cap concurrency at" in decision.recommendation
    assert "confirm the cause before making it permanent" in decision.recommendation
    # Containment touches the chunk budget exactly when the primary finding blames it: a
    # long prompt prefilled within the first second can make H1 primary (the machine's
    # speed decides how far the run got before the server died), else the budget is left.
    blames_budget = diagnosis.primary is not None and diagnosis.primary.finding == "H1"
    assert ("max_num_batched_tokens" in decision.recommendation) == blames_budget
    write_diagnosis(run_dir, diagnosis)
    assert RunDir(run_dir).read_json("diagnosis.json")["decision"]["hard_failure"] is True
