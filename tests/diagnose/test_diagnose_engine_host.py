"""H2 detects a 3 ms per-step host overhead on the server's own step clock (h100, h200).

Eight closed-loop users decode side by side at budget 512; the planted overhead is
``host_overhead_step_s=0.003`` — about 40 % of an H100's 8-request decode step and
55 % of an H200's. On a busy client a late token makes the next gap short, so the
client's gaps can hide it; the server's step histogram cannot, and it decides. The
healthy control (no overhead) must not support H2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from diagnose_bench import bench, evidence_value

from diagnose.checklist import run_checklist
from diagnose.context import DiagnoseOptions
from runfmt.diagnosis import Status

OPTIONS = DiagnoseOptions(resamples=200)
EIGHT_USERS = {"num_requests": 24, "concurrency": 8, "seed": 0, "output_len": 100}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("engine-host")
    base = ["max_num_batched_tokens=512"]
    planted = [*base, "host_overhead_step_s=0.003"]
    return {
        "h100-sxm": bench(root / "h100", "shared-prefix", EIGHT_USERS, [*planted, "gpu=h100-sxm"]),
        "h200": bench(root / "h200", "shared-prefix", EIGHT_USERS, [*planted, "gpu=h200"]),
        "control": bench(root / "control", "shared-prefix", EIGHT_USERS, [*base, "gpu=h100-sxm"]),
    }


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200"])
def test_three_ms_per_step_supports_h2_and_is_primary(runs, gpu):
    diagnosis = run_checklist(runs[gpu], OPTIONS)
    h2 = diagnosis.hypothesis("H2")
    assert h2.status == Status.SUPPORTED, h2.summary
    assert h2.basis == "server"
    roofline = evidence_value(h2, "roofline step at the server's batch")
    excess = evidence_value(h2, "server decode step") - roofline
    assert excess == pytest.approx(0.003, rel=0.15)  # the planted 3 ms, read back
    assert diagnosis.primary.finding == "H2"
    assert diagnosis.decision.recommendation.startswith("Profile the server")


def test_the_healthy_control_does_not_support_h2(runs):
    diagnosis = run_checklist(runs["control"], OPTIONS)
    h2 = diagnosis.hypothesis("H2")
    assert h2.status == Status.NOT_SUPPORTED, h2.summary
    assert evidence_value(h2, "server decode step / roofline step") < 1.1
    assert diagnosis.primary.finding != "H2"
