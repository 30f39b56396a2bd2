"""``diagnose ab --launch``: real server processes, started, health-waited and stopped for sure.

The launched command is the embedded engine itself (``prefillscope serve`` of this
environment) for a full A/B over three chunk sizes, and small Python servers for the
ways a launch goes wrong: one that ignores SIGTERM (and leaves a child that ignores it
too) must be SIGKILLed as a group after the grace period; one that dies at start, or
never becomes healthy, must give one line with its log tail and leave nothing running.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

import pytest
from ab_support import (
    INTERFERENCE,
    PREFILLSCOPE,
    STUB,
    TIMING_TOLERANCES,
    ab_json,
    assert_refused_for_lateness,
    diagnose_ab,
    engine_ran_late,
    gone,
    pids,
    run_json,
    trial_dirs,
)

from runfmt.abresult import ABResult
from session.launcher import LaunchedServer, free_port


@pytest.mark.parametrize(("mode", "how"), [("stubborn", "sigkill"), ("polite", "sigterm")])
def test_a_server_ignoring_sigterm_is_killed_with_its_children(tmp_path: Path, mode, how):
    script = tmp_path / "stub.py"
    script.write_text(STUB)
    port = free_port()
    log = tmp_path / "server.log"
    server = LaunchedServer([sys.executable, str(script), str(port), mode], port, log, "stub")

    async def lifecycle() -> tuple[float, object]:
        server.start()
        ready = await server.wait_healthy(30)
        return ready, await server.stop(grace_s=0.5)

    ready, stopped = asyncio.run(lifecycle())
    assert ready > 0 and stopped.how == how
    assert all(gone(pid) for pid in pids(log))
    if how == "sigkill":
        assert stopped.seconds >= 0.5 and stopped.returncode == -9


def test_a_command_that_dies_at_start_is_one_line_with_its_log_tail(tmp_path: Path):
    dying = f"{sys.executable} -c 'import sys; print(\"no such flag: --frob\"); sys.exit(3)'"
    code, _, err = diagnose_ab(
        "--chunks", "512,1024", *INTERFERENCE, "--out", tmp_path / "ab",
        "--launch", f"{dying} {{chunk}} {{port}}",
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(
        "prefillscope: error: --launch: arm 512 (chunk 512): exited with status 3"
    )
    assert "log tail: no such flag: --frob" in err and str(tmp_path / "ab" / "servers") in err
    assert (tmp_path / "ab" / "servers" / "1024.log").read_text().strip() == "no such flag: --frob"


def test_a_server_never_healthy_is_stopped_after_the_timeout(tmp_path: Path):
    script = tmp_path / "silent.py"
    pid_file = tmp_path / "pid-{chunk}"
    script.write_text("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\n")
    script.write_text(
        script.read_text() + "print('loading weights…', flush=True)\ntime.sleep(600)\n"
    )
    launch = f"{shlex.quote(sys.executable)} {script} {pid_file} {{port}}"
    code, _, err = diagnose_ab(
        "--chunks", "512,1024", *INTERFERENCE, "--out", tmp_path / "ab",
        "--launch", launch, "--startup-timeout", "2", "--stop-grace", "1",
    )  # fmt: skip
    assert code == 2 and "not healthy after 2 s; log tail: loading weights…" in err
    for chunk in (512, 1024):
        assert gone(int((tmp_path / f"pid-{chunk}").read_text()))


@pytest.mark.slow
def test_a_launched_a_b_over_three_chunk_sizes(tmp_path: Path):
    launch = f"{PREFILLSCOPE} serve --port {{port}} --max-num-batched-tokens {{chunk}}"
    out = tmp_path / "ab"
    code, stdout, _ = diagnose_ab(
        "--chunks", "512,2048,4096", "--launch", launch, *INTERFERENCE, "--slo", "itl=60ms",
        "--out", out, "--vocab-size", "32000",
    )  # fmt: skip
    doc = ABResult.from_json(json.loads((out / "ab.json").read_text()))
    verdict = doc.verdict
    assert verdict is not None
    assert doc.mode == "launch" and doc.launch == tuple(shlex.split(launch))
    if engine_ran_late(doc):  # a starved machine: the refusal naming it, never a winner
        assert_refused_for_lateness(code, doc)
    else:
        assert code == 0, verdict
        assert (verdict.winner, verdict.decided_by) == (512, ("slo",))
        decision = verdict.sentence.split(". Trade-off: ")[0]  # then what 512 gave up, if any
        assert decision.endswith("with ITL p99 \u2264 60 ms, choose 512")
        assert [(r.chunk, r.meets_slo) for r in doc.tradeoff] == [
            (512, True),
            (2048, False),
            (4096, False),
        ]
    # one server per arm, started once, kept across its trials, stopped by SIGTERM
    servers = doc.servers
    assert len(servers) == 3 and all(s.stopped.how == "sigterm" for s in servers)
    assert all(Path(s.log).parent == out / "servers" for s in servers)
    chunk_at = {s.url: int(s.command[-1]) for s in servers}  # … --max-num-batched-tokens N
    urls = [run_json(r)["target"]["url"] for r in trial_dirs(doc)]
    assert [chunk_at[u] for u in urls] == [512, 2048, 4096] * 3
    warmups = doc.warmup_trials  # one unmeasured round first: the servers start cold
    assert [Path(t.run_dir).name for t in warmups] == ["01-512-w1", "02-2048-w1", "03-4096-w1"]
    assert all(t.warmup for t in warmups)
    lines = stdout.splitlines()
    assert sum(line.startswith("trial ") for line in lines) == 2 * 12  # progress per trial
    assert lines[0].startswith("starting 3 servers: ") and lines[1].startswith("ready: ")
    for title in ("arms (trials pooled)", "trade-off by chunk size", "conditions", "verdict"):
        assert title in stdout


def test_restart_per_trial_gives_every_trial_a_fresh_server(tmp_path: Path):
    launch = f"{PREFILLSCOPE} serve --port {{port}} --max-num-batched-tokens {{chunk}}"
    workload = [
        "--workload", "shared-prefix", "--num-requests", "6", "--rate", "20", "--seed", "1",
        "--set", "output_len=4", "--set", "prefix_len=64", "--set", "suffix_len=32",
        "--vocab-size", "32000", "--gpu-telemetry", "off", "--resamples", "200", *TIMING_TOLERANCES,
    ]  # fmt: skip
    code, doc = ab_json(
        "--chunks", "512,1024", "--launch", launch, *workload, "--restart-per-trial",
        "--warmup-trials", "0", "--out", tmp_path / "ab",
    )  # fmt: skip
    assert code in (0, 1) and not doc.warmup_trials
    servers = doc.servers
    assert len(servers) == 6 and all(s.stopped.how == "sigterm" for s in servers)
    urls = [run_json(r)["target"]["url"] for r in trial_dirs(doc)]
    assert urls == [s.url for s in servers]  # started for its trial, stopped after it
    assert [int(s.command[-1]) for s in servers] == [512, 1024] * 3
    logs = sorted(p.name for p in (tmp_path / "ab" / "servers").iterdir())
    assert logs == sorted(f"{c}-r{r}.log" for c in (512, 1024) for r in (1, 2, 3))
