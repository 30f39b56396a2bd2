"""The checklist names the planted cause on real runs of the embedded engine (H1–H3).

Each run is ``prefillscope bench`` against the embedded engine over loopback, planted
with one cause through ``--engine``: an oversized chunk budget (H1), host overhead per
step and per sequence (H2), a large decode batch at long contexts on a low-bandwidth GPU
(H3). The healthy control — the same interference traffic at budget 512 — must come
out with nothing supported, and the decision rule must ask to measure first unless an
absolute SLO is breached.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from diagnose_bench import (
    INTERFERENCE,
    bench,
    dry_run,
    evidence_value,
    side_by_side,
    suggested_reruns,
)

from diagnose.checklist import run_checklist
from diagnose.context import DiagnoseOptions
from probes.slo import parse_slo
from runfmt.diagnosis import Diagnosis, Status

OPTIONS = DiagnoseOptions(resamples=400)


def statuses(diagnosis: Diagnosis) -> dict[str, str]:
    """H1–H4's statuses (overload and the client are judged on their own)."""
    return {h.id: str(h.status) for h in diagnosis.hypotheses if h.id in ("H1", "H2", "H3", "H4")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("engine-steps")
    return side_by_side(
        {
            "oversized": partial(
                bench,
                root / "oversized",
                "interference",
                INTERFERENCE,
                ["max_num_batched_tokens=8192"],
            ),
            "control": partial(
                bench,
                root / "control",
                "interference",
                INTERFERENCE,
                ["max_num_batched_tokens=512"],
            ),
            # Short prompts arriving open-loop (so the batch size varies), 4 ms per step and
            # 1 ms per running sequence of host work on top of the GPU's.
            "host": partial(
                bench,
                root / "host",
                "shared-prefix",
                {
                    "num_requests": 60,
                    "rate": 20,
                    "seed": 1,
                    "groups": 4,
                    "prefix_len": 64,
                    "suffix_len": 64,
                    "output_len": 40,
                },
                [
                    "max_num_batched_tokens=512",
                    "host_overhead_step_s=0.004",
                    "host_overhead_per_seq_s=0.001",
                ],
            ),
            # 64 sequences decoding at 6000 tokens of context each (one shared, cached
            # prefix: the prefill is paid once) on an L40S; time_scale 0.5 keeps it short.
            "bandwidth": partial(
                bench,
                root / "bandwidth",
                "shared-prefix",
                {
                    "num_requests": 64,
                    "concurrency": 64,
                    "seed": 1,
                    "groups": 1,
                    "prefix_len": 6000,
                    "suffix_len": 16,
                    "output_len": 40,
                },
                ["gpu=l40s", "time_scale=0.5"],
            ),
        }
    )


def test_an_oversized_budget_supports_h1(runs):
    diagnosis = run_checklist(runs["oversized"], OPTIONS)
    h1 = diagnosis.hypothesis("H1")
    assert h1.status == Status.SUPPORTED, h1.summary
    assert evidence_value(h1, "mixed/decode step time ratio") > 10
    assert evidence_value(h1, "ITL mean ratio, overlapping / clear gaps") > 4
    assert evidence_value(h1, "token budget per step") == 8192
    assert h1.summary.startswith("Correlation, not proof")
    assert h1.next.startswith("prefillscope diagnose ab --chunks 512,8192 --workload interference")
    assert statuses(diagnosis) == {
        "H1": "supported",
        "H2": "not supported",
        "H3": "not supported",
        "H4": "not supported",
    }
    assert diagnosis.primary.finding == "H1"
    assert diagnosis.primary.confidence == "strong"  # > 10× on the server's own step clock
    assert diagnosis.decision.recommendation.startswith(
        "A/B the chunk size before changing cache policy: prefillscope diagnose ab "
        "--chunks 512,8192"
    )


def test_the_healthy_control_supports_nothing_and_asks_to_measure(runs):
    diagnosis = run_checklist(runs["control"], OPTIONS)
    assert Status.SUPPORTED not in statuses(diagnosis).values(), statuses(diagnosis)
    h1 = diagnosis.hypothesis("H1")
    assert h1.status == Status.NOT_SUPPORTED
    assert evidence_value(h1, "mixed/decode step time ratio") < 4
    assert diagnosis.prefix_cache.status == "as expected"
    assert not diagnosis.decision.hard_failure
    primary = diagnosis.primary
    assert primary.finding == "none" or primary.confidence == "weak", primary
    assert "diagnose ab" not in diagnosis.decision.recommendation


def test_an_absolute_slo_breach_gets_bounded_containment(runs):
    diagnosis = run_checklist(runs["oversized"], DiagnoseOptions(slo=parse_slo("itl=1ms")))
    decision = diagnosis.decision
    assert decision.hard_failure
    assert any(r.startswith("ITL p99") and "itl<=0.001 s" in r for r in decision.reasons)
    assert "lower max_num_batched_tokens from 8192 to 2048" in decision.recommendation
    assert "prefillscope diagnose ab --chunks 512,8192" in decision.recommendation


def test_host_overhead_supports_h2_not_h1(runs):
    diagnosis = run_checklist(runs["host"], OPTIONS)
    h2 = diagnosis.hypothesis("H2")
    assert h2.status == Status.SUPPORTED, h2.summary
    assert evidence_value(h2, "ITL floor / roofline step") > 2
    assert evidence_value(h2, "server decode step / roofline step") > 2
    slope = evidence_value(h2, "ITL excess over roofline per running request")
    assert slope == pytest.approx(0.001, rel=0.3)  # the planted 1 ms per sequence
    assert diagnosis.hypothesis("H1").status != Status.SUPPORTED
    assert diagnosis.hypothesis("H3").status == Status.NOT_SUPPORTED


def test_long_contexts_on_a_low_bandwidth_gpu_support_h3(runs):
    diagnosis = run_checklist(runs["bandwidth"], OPTIONS)
    h3 = diagnosis.hypothesis("H3")
    assert h3.status == Status.SUPPORTED, h3.summary
    assert evidence_value(h3, "share of the server's decode step spent reading KV") > 50
    assert h3.basis == "server"
    assert evidence_value(h3, "median decode batch") == 64
    assert "l40s" in next(e.source for e in h3.evidence if e.name.startswith("KV bytes"))
    assert diagnosis.hypothesis("H2").status == Status.NOT_SUPPORTED
    assert diagnosis.hypothesis("H1").status != Status.SUPPORTED


def test_the_command_on_a_real_run(runs):
    cli = Path(sys.executable).with_name("prefillscope")
    done = subprocess.run(
        [str(cli), "diagnose", str(runs["oversized"]), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert json.loads((runs["oversized"] / "diagnosis.json").read_text()) == doc
    assert doc["hypotheses"][0]["id"] == "H1" and doc["hypotheses"][0]["status"] == "supported"
    table = subprocess.run(
        [str(cli), "diagnose", str(runs["control"])], capture_output=True, text=True, timeout=120
    )
    assert table.returncode == 0 and "no hard failure" in table.stdout


def test_the_suggested_reruns_are_commands_bench_accepts(runs, monkeypatch, capsys):
    """Interference runs carry --rate and decode streams: the rerun must say both."""
    commands = suggested_reruns(
        run_checklist(runs[name], OPTIONS) for name in ("oversized", "host")
    )
    for command in commands:
        plan = dry_run(command, monkeypatch, capsys)
        assert plan["requests"] > 0
        if "interference" in command:
            assert plan["closed_loop_requests"] > 0 and plan["open_loop_requests"] > 0
