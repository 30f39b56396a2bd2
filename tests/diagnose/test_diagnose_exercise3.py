"""Exercise 3 end to end: long prompts join a steady chat load on a server with a large
chunk budget and a pool that is mostly prefix cache.

BEFORE: six closed-loop chat streams (64-token prompts, 300-token answers) with short
prompts arriving beside them. AFTER: the same, but the arriving prompts are 8192 tokens
long, on a server whose budget (8192) lets one step carry a whole prompt. The pool (2400
blocks) is small enough that the finished long prompts stay in it as reclaimable cache,
so "memory is full" is the obvious wrong reading.

The diagnosis of AFTER must name H1 as its primary finding, say that H4 is reservation,
not exhaustion, and ask for the chunk-size A/B before any cache-policy change — with a
command the CLI accepts; ``prefillscope compare BEFORE AFTER`` must fail its ITL gate.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from diagnose_bench import bench

from diagnose.checklist import run_checklist
from diagnose.context import DiagnoseOptions
from runfmt.diagnosis import Status

CHAT = {
    "num_requests": 4,
    "rate": 2,
    "seed": 5,
    "concurrency": 6,
    "stream_requests": 1,
    "stream_output_len": 300,
}
ENGINE = ["gpu=h100-sxm", "max_num_batched_tokens=8192", "num_gpu_blocks=2400"]
CLI = str(Path(sys.executable).with_name("prefillscope"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exercise3")
    return {
        "before": bench(root / "before", "interference", CHAT | {"long_prompt_len": 64}, ENGINE),
        "after": bench(root / "after", "interference", CHAT | {"long_prompt_len": 8192}, ENGINE),
    }


def value(finding, name: str) -> float:
    return next(e.value for e in finding.evidence if e.name == name)


def test_the_diagnosis_names_h1_and_not_memory(runs):
    diagnosis = run_checklist(runs["after"], DiagnoseOptions(resamples=400))
    primary = diagnosis.primary
    assert primary.finding == "H1", (primary, diagnosis.hypothesis("H1").summary)
    assert primary.confidence == "strong"  # the server's step clock, far past 4×
    h4 = diagnosis.hypothesis("H4")
    assert h4.status == Status.NOT_SUPPORTED
    assert h4.summary.startswith("Reservation, not exhaustion: no preemptions")
    # The pool looked busy — on average ~40 % of it reclaimable prefix cache — but the
    # blocks pinned by running requests never came near the whole pool.
    assert value(h4, "reclaimable blocks (mean)") > 30
    assert value(h4, "active blocks (peak)") < 95
    assert value(h4, "preemptions") == 0
    recommendation = diagnosis.decision.recommendation
    assert recommendation.startswith(
        "A/B the chunk size before changing cache policy: prefillscope diagnose ab "
        "--chunks 512,8192 --workload interference"
    )


def test_the_diagnose_command_prints_the_same_primary(runs):
    done = subprocess.run(
        [CLI, "diagnose", str(runs["after"]), "--json"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["primary"]["finding"] == "H1" and doc["primary"]["why"]
    statuses = {h["id"]: h["status"] for h in doc["hypotheses"]}
    assert statuses["H1"] == "supported" and statuses["H4"] == "not supported"


def test_compare_before_after_fails_the_itl_gate(runs):
    done = subprocess.run(
        [
            CLI,
            "compare",
            str(runs["before"]),
            str(runs["after"]),
            "--force",  # BEFORE's prompts were short: a different workload, on purpose
            "--gate",
            "itl_p99:+25%",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, (done.stdout[-3000:], done.stderr[-2000:])
