"""H5 reads canonical series only: the same KV transfers give the same verdict whichever
flavour's names the server gave them.

A P/D pair's prefill side, with ten requests whose KV took 40 ms each to cross and whose
TTFT summed to 1 s: named the vLLM way (NIXL's ``nixl_xfer_time_seconds`` in seconds,
``nixl_bytes_transferred``), the SGLang way (``kv_transfer_latency_ms`` in milliseconds,
``kv_transfer_total_mb`` in MiB, SGLang's own TTFT histogram), and the embedded engine's
way (its per-request wait). Before H5 read through the mappings, the SGLang naming gave
"not a disaggregated (P/D) server".
"""

from __future__ import annotations

import pytest
from run_shapes import metric_row, steady_streams
from rundirs import write_run

from diagnose import h5_kv_transfer
from diagnose.context import DiagnoseOptions, build_context
from diagnose.inputs import load_run_view
from runfmt.diagnosis import Status
from runtime.engine_metrics import KV_TRANSFER_SECONDS

TRANSFERS = 10
SECONDS_EACH = 0.04
BYTES_EACH = 8 * 1024 * 1024
TTFT_SUM_S = 1.0


def _histogram(metric: str, count: float, total: float, le: str = "+Inf") -> list[dict]:
    rows = []
    for t, n, s in ((0.0, 0.0, 0.0), (1.0, count, total)):
        rows.append(metric_row(t, f"{metric}_bucket", n, le=le))
        rows.append(metric_row(t, f"{metric}_count", n))
        rows.append(metric_row(t, f"{metric}_sum", s))
    return rows


NAMINGS = {
    "vllm": _histogram("vllm:time_to_first_token_seconds", TRANSFERS, TTFT_SUM_S)
    + _histogram("vllm:nixl_xfer_time_seconds", TRANSFERS, TRANSFERS * SECONDS_EACH)
    + _histogram("vllm:nixl_bytes_transferred", TRANSFERS, TRANSFERS * BYTES_EACH)
    + [metric_row(t, "vllm:num_requests_running", 1.0) for t in (0.0, 1.0)],
    "sglang": _histogram("sglang:time_to_first_token_seconds", TRANSFERS, TTFT_SUM_S)
    + _histogram("sglang:kv_transfer_latency_ms", TRANSFERS, TRANSFERS * SECONDS_EACH * 1e3)
    + _histogram("sglang:kv_transfer_total_mb", TRANSFERS, TRANSFERS * BYTES_EACH / 2**20)
    + [metric_row(t, "sglang:num_running_reqs", 1.0) for t in (0.0, 1.0)],
    "embedded": _histogram("vllm:time_to_first_token_seconds", TRANSFERS, TTFT_SUM_S)
    + _histogram(KV_TRANSFER_SECONDS, TRANSFERS, TRANSFERS * SECONDS_EACH),
}


def _finding(tmp_path, flavour: str):
    records, chunks = steady_streams(2, 5, 0.05)
    info = {"target": {"flavour": flavour}}
    path = write_run(tmp_path / flavour, records, chunks, info, NAMINGS[flavour])
    return h5_kv_transfer.assess(build_context(load_run_view(path), DiagnoseOptions()))


def _evidence(finding, name: str) -> float:
    return next(e.value for e in finding.evidence if e.name == name)


def test_the_same_transfers_named_three_ways_give_one_verdict(tmp_path) -> None:
    findings = {flavour: _finding(tmp_path, flavour) for flavour in NAMINGS}
    share = TRANSFERS * SECONDS_EACH / TTFT_SUM_S
    for flavour, finding in findings.items():
        print(f"\n{flavour}: H5 {finding.status} — {finding.summary}")
        for e in finding.evidence:
            print(f"  {e.name}: {e.value:.4g} {e.unit} — {e.source}")
        assert finding.status == Status.SUPPORTED, (flavour, finding.summary)
        assert finding.strength == pytest.approx(share / h5_kv_transfer.SHARE), flavour
        assert _evidence(finding, "KV wait / TTFT") == pytest.approx(share), flavour
        assert _evidence(finding, "KV wait per request (mean)") == pytest.approx(SECONDS_EACH)
    for flavour in ("vllm", "sglang"):
        assert _evidence(findings[flavour], "bytes per transfer (mean)") == pytest.approx(
            BYTES_EACH
        )
    sglang_sources = " ".join(e.source for e in findings["sglang"].evidence)
    assert "kv_transfer_latency_ms (sglang:kv_transfer_latency_ms)" in sglang_sources
    assert "ttft (sglang:time_to_first_token_seconds)" in sglang_sources
    vllm_sources = " ".join(e.source for e in findings["vllm"].evidence)
    assert "kv_transfer_latency_ms (vllm:nixl_xfer_time_seconds)" in vllm_sources


def test_a_server_with_no_transfers_is_not_applicable_under_either_naming(tmp_path) -> None:
    for flavour, running in (
        ("vllm", "vllm:num_requests_running"),
        ("sglang", "sglang:num_running_reqs"),
    ):
        records, chunks = steady_streams(2, 5, 0.05)
        rows = [metric_row(t, running, 1.0) for t in (0.0, 1.0)]
        path = write_run(
            tmp_path / flavour, records, chunks, {"target": {"flavour": flavour}}, rows
        )
        finding = h5_kv_transfer.assess(build_context(load_run_view(path), DiagnoseOptions()))
        assert finding.status == Status.NOT_APPLICABLE
        assert "prefillscope simulate --workload " in (finding.next or "")
