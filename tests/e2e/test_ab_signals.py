"""A stop signal to ``diagnose ab --launch``: no launched server outlives it, ``ab.json``
says ``interrupted`` and keeps the trials done.

A CI cancel sends SIGTERM to the command only (not to the servers' process groups): the
A/B must stop the servers itself. The launched servers are ``prefillscope serve`` of this
environment, each with a served-model name unique to the test, so that every process of
theirs can be found in ``/proc`` by its command line, the server's children included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from ab_support import PREFILLSCOPE, STUB, TIMING_TOLERANCES, gone, pids
from bench_support import wait_for_rows

from runtime.lifetime import SETPRIV

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "diagnose", "ab"]
#: Long trials (400 requests at 25/s): the signal lands mid-trial.
WORKLOAD = [
    "--workload", "shared-prefix", "--set", "output_len=40", "--num-requests", "400",
    "--rate", "25", "--vocab-size", "32000", "--gpu-telemetry", "off", *TIMING_TOLERANCES,
]  # fmt: skip


def processes_with(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def _marked_launch(prefix: str) -> tuple[str, str]:
    """A unique marker and a ``--launch`` template whose servers carry it as their model
    name, so that their processes can be found by command line."""
    marker = f"{prefix}-{uuid.uuid4().hex[:12]}"
    launch = (
        f"{PREFILLSCOPE} serve --port {{port}} --max-num-batched-tokens {{chunk}} "
        f"--served-model-name {marker} --fixed-step-ms 5"
    )
    return marker, launch


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_signal_mid_trial_stops_every_launched_server(
    tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    marker, launch = _marked_launch("ab-signal")
    out = tmp_path / "ab"
    ab = subprocess.Popen(
        [*CLI, "--chunks", "512,1024", "--launch", launch, "--warmup-trials", "0",
         "--stop-grace", "5", "--out", str(out), *WORKLOAD],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        first = out / "trials" / "01-512-r1" / "requests.jsonl"
        wait_for_rows(first, 10, timeout_s=120)
        running = processes_with(marker)
        assert len(running) >= 2, running  # both arms' servers (and any children of theirs)
        ab.send_signal(sig)
        stdout, stderr = ab.communicate(timeout=120)
    finally:
        if ab.poll() is None:
            ab.kill()
            ab.wait()
    assert ab.returncode == status, stderr
    assert processes_with(marker) == [], "a launched server outlived the A/B"
    assert all(gone(pid, within_s=1) for pid in running)
    doc = json.loads((out / "ab.json").read_text())
    assert doc["status"] == "interrupted" and doc["reason"].startswith("cancelled (")
    servers = doc["servers"]
    assert {s["pid"] for s in servers} <= set(running)  # the servers it launched, by PID
    assert len(servers) == 2 and all(s["stopped"]["how"] in ("sigterm", "sigkill") for s in servers)
    # the trial the signal cut is kept, interrupted, with its finished requests
    trials = [t for arm in doc["arms"] for t in arm["trials"]]
    assert [t["status"] for t in trials] == ["interrupted"]
    run = json.loads((Path(trials[0]["run_dir"]) / "run.json").read_text())
    assert run["status"] == "interrupted" and run["result"]["requests"]["sent"] >= 10
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prefillscope: diagnose ab interrupted:")
    assert "verdict" in stdout  # the A/B's view was printed


def test_an_unexpected_error_mid_a_b_still_stops_the_servers_and_writes_ab_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exception path: a trial that raises (here, a planted ``RuntimeError``) leaves
    no launched server running and an ``ab.json`` saying ``failed`` and why."""
    from prefillscope.cli import main
    from session import ab_runner

    script = tmp_path / "stub.py"
    script.write_text(STUB)
    launch = f"{sys.executable} {script} {{port}} polite --chunk {{chunk}}"

    async def broken_trial(*args: object, **kwargs: object) -> None:
        raise RuntimeError("planted failure")

    monkeypatch.setattr(ab_runner, "run_bench", broken_trial)
    out = tmp_path / "ab"
    argv = ["prefillscope", "diagnose", "ab", "--chunks", "512,1024", "--launch", launch]
    argv += ["--out", str(out), *WORKLOAD]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(RuntimeError, match="planted failure"):
        main()
    doc = json.loads((out / "ab.json").read_text())
    assert doc["status"] == "failed" and doc["reason"] == "RuntimeError: planted failure"
    assert len(doc["servers"]) == 2
    for log in sorted((out / "servers").glob("*.log")):
        assert all(gone(pid) for pid in pids(log)), log.read_text()


@pytest.mark.skipif(SETPRIV is None, reason="util-linux's setpriv is not installed")
def test_a_killed_a_b_takes_its_launched_servers_along(tmp_path: Path) -> None:
    # SIGKILL runs none of our clean-up: the kernel's parent-death signal ends the servers
    marker, launch = _marked_launch("ab-kill")
    out = tmp_path / "ab"
    ab = subprocess.Popen(
        [*CLI, "--chunks", "512,1024", "--launch", launch, "--warmup-trials", "0",
         "--out", str(out), *WORKLOAD],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_rows(out / "trials" / "01-512-r1" / "requests.jsonl", 10, timeout_s=120)
        running = processes_with(marker)
        assert len(running) >= 2, running
    finally:
        ab.kill()
        ab.wait()
    assert all(gone(pid, within_s=30) for pid in running), "a launched server outlived the A/B"
    assert processes_with(marker) == []


#: A server that never answers its health check: still launching.
NEVER_READY = f"{sys.executable} -c 'import time; time.sleep(600)' {{chunk}} {{port}}"


@pytest.mark.skipif(SETPRIV is None, reason="util-linux's setpriv is not installed")
def test_a_kill_while_the_servers_launch_leaves_ab_json_running(tmp_path: Path) -> None:
    # a stop before the first trial began: ab.json was written when the A/B started
    out = tmp_path / "ab"
    ab = subprocess.Popen(
        [*CLI, "--chunks", "512,1024", "--launch", NEVER_READY, "--out", str(out), *WORKLOAD],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(list((out / "servers").glob("*.log"))) < 2:  # both servers launching
            assert ab.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        ab.kill()
        ab.wait()
    doc = json.loads((out / "ab.json").read_text())
    assert doc["status"] == "running" and doc["chunks"] == [512, 1024]
    assert [arm["trials"] for arm in doc["arms"]] == [[], []]
    assert doc["settings"]["trials"] == 3 and "verdict" not in doc  # nothing analysed yet
