"""A run against vLLM: no step metrics, no pool buckets — the checklist says what it lacks.

The server samples are two real scrapes of a vLLM 0.32 server (``fixtures/vllm-cpu``),
the client side an interference pattern whose long prefills stall the decode streams.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_shapes import RunShape, scrape_rows
from rundirs import report_run

from diagnose.checklist import run_checklist
from diagnose.context import DiagnoseOptions
from runfmt.diagnosis import Diagnosis, Status
from runfmt.rundir import RunDir


@pytest.fixture(scope="module")
def diagnosis(tmp_path_factory, fixtures_dir: Path) -> Diagnosis:
    path = report_run(
        tmp_path_factory.mktemp("vllm") / "run",
        RunShape(
            prefill_s=0.4,
            failures=0,
            long_prompts=8,
            diagnosis=False,
            pool=None,
            model="tiny-llama",
        ),
    )
    run = RunDir(path)
    for t, name in ((0.0, "tiny-metrics-before.prom"), (30.0, "tiny-metrics-after.prom")):
        text = (fixtures_dir / "vllm-cpu" / name).read_text()
        run.table("server_metrics").append_many(scrape_rows(text, t))
    run.close()
    info = run.read_json("run.json")
    info["probes"] = {"server_metrics": {"flavour": "vllm"}}
    run.write_json("run.json", info)
    return run_checklist(path, DiagnoseOptions(resamples=400))


def test_h1_falls_back_to_client_attribution(diagnosis: Diagnosis):
    h1 = diagnosis.hypothesis("H1")
    assert h1.status == Status.SUPPORTED, h1.summary
    assert "client timestamps; the server shows no step kinds" in h1.summary
    assert any(m.startswith("step kinds (step_time_mixed, step_time_decode)") for m in h1.missing)
    assert any("vLLM's --max-num-batched-tokens" in m for m in h1.missing)
    ratio = next(e for e in h1.evidence if e.name == "ITL mean ratio, overlapping / clear gaps")
    assert ratio.value > 4 and "95 % CI" in ratio.detail


def test_memory_from_vllm_counters_with_the_buckets_it_hides(diagnosis: Diagnosis):
    h4 = diagnosis.hypothesis("H4")
    assert h4.status == Status.NOT_SUPPORTED
    assert h4.summary.startswith("Reservation, not exhaustion: no preemptions")
    sources = {e.name: e.source for e in h4.evidence}
    assert sources["preemptions"] == "server: vllm:num_preemptions_total (increase)"
    assert "vllm:kv_cache_usage_perc" in sources["active share of pool (peak)"]
    # vLLM counts reclaimable and free blocks together: pinned only where bounds meet.
    reclaimable = next(e for e in h4.evidence if e.name == "reclaimable blocks (mean)")
    assert "(derived)" in reclaimable.source and "known in 1 of 2 scrapes" in reclaimable.detail


def test_no_model_no_roofline(diagnosis: Diagnosis):
    for hid in ("H2", "H3"):
        finding = diagnosis.hypothesis(hid)
        assert finding.status == Status.INCONCLUSIVE
        assert any("--model and --gpu" in m for m in finding.missing)
    cache = diagnosis.prefix_cache
    assert any("evictions" in m for m in cache.missing)
    assert "--launch" in diagnosis.hypothesis("H1").next  # the A/B launches vLLM per arm
