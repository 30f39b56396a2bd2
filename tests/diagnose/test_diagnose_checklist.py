"""The checklist on hand-made runs: each hypothesis's rule, the decision rule, the contract."""

from __future__ import annotations

import dataclasses

import pytest
from run_shapes import metric_row, steady_streams
from rundirs import write_run

from diagnose.checklist import run_checklist
from diagnose.context import DiagnoseOptions
from diagnose.roofline import resolve_roofline
from loadgen.records import ErrorKind, RequestRecord
from loadgen.records import Status as RequestStatus
from perfmodel.config import EngineConfig
from probes.slo import parse_slo
from runfmt.diagnosis import Status


def _info(**engine) -> dict:
    config = dataclasses.asdict(dataclasses.replace(EngineConfig(), **engine))
    return {"target": {"model": config["model"], "engine": config | {"stream_interval": 1}}}


def _step_rows(t: float, kind: str, count: int, total: float, le: float) -> list[dict]:
    name = "prefillscope_engine_step_seconds"
    rows = [
        metric_row(t, f"{name}_bucket", float(count if b >= le else 0), kind=kind, le=str(b))
        for b in (0.01, 0.5, float("inf"))
    ]
    rows += [
        metric_row(t, f"{name}_count", float(count), kind=kind),
        metric_row(t, f"{name}_sum", total, kind=kind),
    ]
    return rows


def _pool_rows(t: float, active: float, reclaimable: float, free: float, preempted: float):
    rows = [
        metric_row(t, "prefillscope_engine_kv_blocks", v, state=s)
        for s, v in (("active", active), ("reclaimable", reclaimable), ("free", free))
    ]
    total = active + reclaimable + free
    rows += [
        metric_row(t, "vllm:kv_cache_usage_perc", active / total),
        metric_row(t, "vllm:num_preemptions_total", preempted),
        metric_row(t, "vllm:num_requests_waiting", 0.0),
        metric_row(
            t, "vllm:cache_config_info", 1.0, block_size="16", num_gpu_blocks=str(int(total))
        ),
    ]
    return rows


def _embedded(info: dict) -> dict:
    return info | {"probes": {"server_metrics": {"flavour": "embedded"}}}


@pytest.mark.parametrize(
    ("step_s", "status"), [(0.0072, Status.NOT_SUPPORTED), (0.02, Status.SUPPORTED)]
)
def test_h2_compares_the_itl_floor_with_the_roofline(tmp_path, step_s, status):
    records, chunks = steady_streams(4, 200, step_s)
    run = write_run(tmp_path / "r", records, chunks, _info())
    h2 = run_checklist(run).hypothesis("H2")
    assert h2.status == status, h2.summary
    ratio = next(e.value for e in h2.evidence if e.name == "ITL floor / roofline step")
    assert ratio == pytest.approx(step_s / 0.00670, rel=0.05)  # 4 × 100-token decodes on an H100
    if status == Status.SUPPORTED:
        assert h2.summary.startswith("Correlation with a model, not proof")


def test_h2_and_h3_need_a_model_and_gpu_without_an_embedded_engine(tmp_path):
    records, chunks = steady_streams(4, 200, 0.02)
    run = write_run(tmp_path / "r", records, chunks, {"target": {"flavour": "vllm"}})
    diagnosis = run_checklist(run)
    for hid in ("H2", "H3"):
        finding = diagnosis.hypothesis(hid)
        assert finding.status == Status.INCONCLUSIVE
        assert any("--model and --gpu" in m for m in finding.missing)
    given = run_checklist(run, DiagnoseOptions(model="llama-3.1-8b", gpu="h100-sxm"))
    assert given.hypothesis("H2").status == Status.SUPPORTED


@pytest.mark.parametrize(
    ("prompt", "status"), [(6000, Status.SUPPORTED), (100, Status.NOT_SUPPORTED)]
)
def test_h3_is_the_share_of_each_gap_spent_reading_kv(tmp_path, prompt, status):
    info = _info(gpu="l40s")
    roofline, _ = resolve_roofline(info["target"]["engine"])
    step = float(roofline.decode_step_s([64], [prompt + 20])[0])  # gaps at the roofline step
    records, chunks = steady_streams(64, 40, step, prompt_tokens=prompt)
    h3 = run_checklist(write_run(tmp_path / "r", records, chunks, info)).hypothesis("H3")
    assert h3.status == status, h3.summary
    share = next(e.value for e in h3.evidence if e.name.startswith("share of each decode gap"))
    assert (share > 50) == (status == Status.SUPPORTED)


def test_h1_from_step_kinds(tmp_path):
    records, chunks = steady_streams(4, 100, 0.007)
    rows = []
    for t, n in ((0.0, 0), (1.0, 10)):
        rows += _step_rows(t, "mixed", n, 0.3 * n, 0.5) + _step_rows(
            t, "decode", 40 * n, 0.28 * n, 0.01
        )
    run = write_run(
        tmp_path / "r", records, chunks, _embedded(_info(max_num_batched_tokens=8192)), rows
    )
    h1 = run_checklist(run).hypothesis("H1")
    ratio = next(e.value for e in h1.evidence if e.name == "mixed/decode step time ratio")
    assert ratio == pytest.approx(0.3 / 0.007)
    assert h1.status == Status.SUPPORTED and "Correlation, not proof" in h1.summary
    assert h1.next.startswith("prefillscope diagnose ab --chunks 512,8192")


def test_h1_without_step_kinds_or_long_prefills_is_not_applicable(tmp_path):
    records, chunks = steady_streams(4, 100, 0.007)
    h1 = run_checklist(write_run(tmp_path / "r", records, chunks)).hypothesis("H1")
    assert h1.status == Status.NOT_APPLICABLE
    assert any("step kinds" in m for m in h1.missing)
    assert any("--max-num-batched-tokens" in m for m in h1.missing)


@pytest.mark.parametrize("preempted", [0.0, 12.0])
def test_h4_tells_reservation_from_exhaustion(tmp_path, preempted):
    records, chunks = steady_streams(2, 50, 0.007)
    rows = _pool_rows(0.0, 100, 2500, 1400, 0.0) + _pool_rows(1.0, 300, 3000, 700, preempted)
    run = write_run(tmp_path / "r", records, chunks, _embedded(_info()), rows)
    h4 = run_checklist(run).hypothesis("H4")
    if preempted:
        assert h4.status == Status.SUPPORTED and "12 preemptions" in h4.summary
    else:
        assert h4.status == Status.NOT_SUPPORTED
        assert h4.summary.startswith("Reservation, not exhaustion")
        assert "at most 8 % of blocks active" in h4.summary
        assert "69 % reclaimable" in h4.summary


def _failed(rid: str, kind: ErrorKind, t: float) -> RequestRecord:
    return RequestRecord(
        id=rid,
        sent_s=t,
        end_s=t + 0.01,
        prompt_tokens=100,
        status=RequestStatus.ERROR,
        error_kind=kind,
    )


def test_no_hard_failure_and_no_cause_means_measure_first_without_a_chunk_ab(tmp_path):
    records, chunks = steady_streams(4, 100, 0.007)
    diagnosis = run_checklist(write_run(tmp_path / "r", records, chunks, _info()))
    decision = diagnosis.decision
    assert not decision.hard_failure
    assert diagnosis.primary.finding == "none"
    assert decision.recommendation.startswith("No cause stands out: measure before changing")
    assert "diagnose ab" not in decision.recommendation


def test_the_decision_follows_the_primary_finding(tmp_path):
    """20 ms gaps where the roofline explains 7 ms: H2 is primary, and the decision box
    asks for its measurement (a profile and a rerun), not a chunk-size A/B."""
    records, chunks = steady_streams(4, 200, 0.02)
    diagnosis = run_checklist(write_run(tmp_path / "r", records, chunks, _info()))
    assert diagnosis.primary.finding == "H2"
    assert diagnosis.primary.confidence == "moderate"  # the client's clock, no server step
    assert "no other finding is supported" in diagnosis.primary.why
    recommendation = diagnosis.decision.recommendation
    assert recommendation.startswith("Profile the server before changing its configuration")
    assert "diagnose ab" not in recommendation and "prefillscope bench" in recommendation


def test_engine_death_and_dropped_connections_call_for_lower_concurrency(tmp_path):
    records, chunks = steady_streams(8, 100, 0.007)
    records += [_failed(f"c{i}", ErrorKind.CONNECT, 0.5) for i in range(3)]
    records.append(_failed("t0", ErrorKind.STREAM_TRUNCATED, 0.4))
    info = _info() | {"status": "interrupted", "reason": "server at http://x stopped answering"}
    decision = run_checklist(write_run(tmp_path / "r", records, chunks, info)).decision
    assert decision.hard_failure
    assert decision.reasons[0] == "the run was interrupted: server at http://x stopped answering"
    assert "3 requests: connections refused or failed (connect)" in decision.reasons
    assert any("(stream_truncated)" in r for r in decision.reasons)
    # 8 streams and 3 failed connections in flight at once: 75 % of 11.
    assert "cap concurrency at 8" in decision.recommendation
    assert "of the 11 requests in flight" in decision.recommendation
    assert decision.recommendation.startswith("Hard failure: contain now")


def test_a_cancelled_run_is_not_a_hard_failure(tmp_path):
    records, chunks = steady_streams(4, 100, 0.007)
    info = {"status": "interrupted", "reason": "cancelled (Ctrl-C)"}
    assert not run_checklist(write_run(tmp_path / "r", records, chunks, info)).decision.hard_failure


def test_an_slo_breach_calls_for_a_smaller_chunk(tmp_path):
    records, chunks = steady_streams(4, 100, 0.007)
    run = write_run(tmp_path / "r", records, chunks, _info(max_num_batched_tokens=8192))
    breached = run_checklist(run, DiagnoseOptions(slo=parse_slo("itl=1ms"))).decision
    assert breached.hard_failure
    assert breached.reasons == ("ITL p99 0.007 s breaches the SLO itl<=0.001 s",)
    assert "lower max_num_batched_tokens from 8192 to 2048" in breached.recommendation
    met = run_checklist(run, DiagnoseOptions(slo=parse_slo("itl=50ms,ttft=1s"))).decision
    assert not met.hard_failure and "no SLO breach" in met.reasons[0]


def test_the_slo_the_run_was_benched_with_applies_by_default(tmp_path):
    records, chunks = steady_streams(4, 100, 0.007)
    info = _info() | {"slo": {"ttft_s": 0.01}}
    decision = run_checklist(write_run(tmp_path / "r", records, chunks, info)).decision
    assert decision.hard_failure and decision.reasons[0].startswith("TTFT p99 0.05 s")
    assert "cap concurrency at 3" in decision.recommendation


def test_the_document_has_the_contract_shape(tmp_path):
    records, chunks = steady_streams(4, 100, 0.007)
    doc = run_checklist(write_run(tmp_path / "r", records, chunks, _info())).to_json()
    assert set(doc) == {"run", "decision", "hypotheses", "prefix_cache", "primary"}
    assert set(doc["decision"]) == {"hard_failure", "reasons", "recommendation"}
    assert [h["id"] for h in doc["hypotheses"]] == ["H1", "H2", "H3", "H4", "OL", "CL", "H5"]
    assert doc["prefix_cache"]["id"] == "PC"
    assert set(doc["primary"]) == {"finding", "confidence", "why", "secondary"}
    assert doc["primary"]["confidence"] in {"strong", "moderate", "weak"}
    statuses = {"supported", "weakened", "not supported", "inconclusive", "not applicable"}
    keys = {"id", "title", "status", "summary", "evidence", "missing", "next"}
    for finding in doc["hypotheses"]:
        ranking = {"strength", "basis", "impact", "explains", "cost_s", "cost_how"}
        assert set(finding) == keys | ranking
        assert finding["status"] in statuses and finding["next"]
        for e in finding["evidence"]:
            assert set(e) == {"name", "value", "unit", "source", "detail"} and e["source"]
    assert doc["prefix_cache"]["status"] in {
        "as expected",
        "thrashing",
        "caching off",
        "identity mismatch",
        "unknown",
    }


def test_a_run_stopped_before_any_request_finished_is_still_diagnosed(tmp_path):
    info = {"status": "failed", "reason": "InputError: vocab_size: …"}
    diagnosis = run_checklist(write_run(tmp_path / "r", [], [], info))
    assert not diagnosis.decision.hard_failure  # the tool stopped itself, not the server
    h2 = diagnosis.hypothesis("H2")
    assert h2.status == Status.INCONCLUSIVE and "at least 50 decode gaps (have 0)" in h2.missing
    assert diagnosis.prefix_cache.status == "unknown"


def _vllm_itl_rows(t: float, in_bucket: float, running: float) -> list[dict]:
    """vLLM's per-token latency histogram (all observations in (5, 10] ms) and running."""
    name = "vllm:inter_token_latency_seconds"
    rows = [
        metric_row(t, f"{name}_bucket", in_bucket if b >= 0.01 else 0.0, le=str(b))
        for b in (0.005, 0.01, 0.025, float("inf"))
    ]
    rows += [
        metric_row(t, f"{name}_count", in_bucket),
        metric_row(t, f"{name}_sum", 0.0075 * in_bucket),
        metric_row(t, "vllm:num_requests_running", running),
    ]
    return rows


def test_h2_reads_vllms_per_token_histogram_before_the_clients_gaps(tmp_path):
    """The client saw 20 ms gaps, the server's own per-token latency is ~7.5 ms: the
    server's clock decides (the rest is network and client), so H2 is not supported."""
    records, chunks = steady_streams(4, 200, 0.02)
    samples = _vllm_itl_rows(0.0, 0.0, 4.0) + _vllm_itl_rows(5.0, 796.0, 4.0)
    info = {"target": {"flavour": "vllm"}, "probes": {"server_metrics": {"flavour": "vllm"}}}
    run = write_run(tmp_path / "r", records, chunks, info, samples)
    h2 = run_checklist(run, DiagnoseOptions(model="llama-3.1-8b", gpu="h100-sxm")).hypothesis("H2")
    assert h2.status == Status.NOT_SUPPORTED, h2.summary
    assert h2.basis == "server"
    step = next(e for e in h2.evidence if e.name == "server decode step")
    assert step.value == pytest.approx(0.0075, rel=0.01)  # the histogram's median
    assert "vllm:inter_token_latency_seconds" in step.source
    floor = next(e.value for e in h2.evidence if e.name == "ITL floor / roofline step")
    assert floor > 2  # what the client alone would have called host overhead


def test_a_client_that_sent_late_is_the_primary_finding_and_caps_client_readings(tmp_path):
    """Every request went out 100 ms after its intended time (two thirds of its TTFT):
    the client shaped this run. The 20 ms gaps (H2 on the client's clock alone) cannot
    be told from the client's own delays, so H2 is capped and the client leads."""
    records, chunks = steady_streams(4, 200, 0.02, start_s=0.1)
    late = [dataclasses.replace(r, intended_s=0.0) for r in records]
    diagnosis = run_checklist(write_run(tmp_path / "r", late, chunks, _info()))
    client = diagnosis.hypothesis("CL")
    assert client.status == Status.SUPPORTED, client.summary
    assert "67 % of the median TTFT is the client's" in client.summary
    assert diagnosis.hypothesis("H2").status == Status.INCONCLUSIVE
    assert diagnosis.primary.finding == "CL"
    assert diagnosis.decision.recommendation.startswith("Rerun from a client that keeps up")
