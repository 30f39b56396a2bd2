"""``simulate --calibrate`` and its held-out check on runs of the real vLLM CPU target.

A real server's run records no GPU, no chunk budget, and here a served name
(``tiny-llama``) that is no preset: the calibration is refused in one line naming the
three, and runs once they are given — ``model=`` the model's folder (its
``config.json``) and a device of its own (``gpu=custom:…``, a CPU's nominal figures,
whose efficiencies the fit finds). vLLM 0.32 exposes no step-time histogram, so the
decode (bandwidth efficiency, per-sequence and per-step host overhead) is fitted to the
client's pure-decode gaps, and the prefill to the client's mean TTFT from the actual
send, less the transport the server's TTFT histogram shows; the server's mean ITL is
read through the canonical ``itl`` series (either of vLLM's two names).

The held-out check: calibrate on a run at ``max_num_batched_tokens`` 512, predict a run
of the same plan at 128 (a second server). The two runs are benched **at the same
time**, one against each server: on a shared 2-core machine the load the other processes
put on it moves a run's TTFT by 2× from one minute to the next (identical runs, minutes
apart: TTFT p50 262 and 903 ms at load averages 4 and 14), so runs made one after the
other compare two machines, not two budgets. The goal is ±10 % on TTFT p50 and ITL p50
and ±25 % on ITL p99; what is asserted is that the check is computed and judged
consistently, and the bounds below for gross breakage. Measured (held-out error on TTFT
p50, ITL p50, ITL p99):

* runs one after the other at load average ~4: −14.1 %, +22.9 %, +10.4 % (the fit before
  the per-step overhead, transport and jitter: −28.8 %, +18.7 %, −53.9 %);
* at the same time, load average 16–30 (other sessions' tests): −22.7 %, −58.0 %,
  −37.3 % (before: −21.4 %, −77.5 %, −57.7 %), and this test's own run −28.5 %, −15.1 %,
  −32.0 %. The same budget's ITL p50 moved from 6 to 24 ms between such runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_support import bench_process
from real_vllm import MAX_MODEL_LEN, MODEL_DIR, VOCAB_SIZE, vllm_target

from session.calibrate import MFU_RANGE, TOLERANCE

pytestmark = pytest.mark.real_vllm

#: How far the held-out run's TTFT p50 and ITL p50 may be from predicted: a bound for
#: gross breakage (a fit on the wrong budget, a TTFT from the intended send), not the goal.
GROSS_BOUND = 0.6
#: The held-out run's chunk budget (the calibrated one is the fixture's 512).
HOLDOUT_BATCHED = 128
#: Requests per second: 0.5 keeps the server out of overload (at 2 the 16 prompts offer
#: ~2,400 tokens/s to a server that prefills ~1,000, so TTFT is mostly the queue's).
RATE = 0.5
ENGINE = [
    f"model={MODEL_DIR}",
    "gpu=custom:peak_flops=1e12,bandwidth=5e10,memory_gib=2",
    "block_size=128",
    "max_num_batched_tokens=512",  # the fixture's MAX_BATCHED
    "max_num_seqs=128",  # at most 16 in flight; the engine needs a budget ≥ its sequences
    f"vocab_size={VOCAB_SIZE}",
    f"max_model_len={MAX_MODEL_LEN}",
]


def _bench_args(url: str, out: Path) -> list[str]:
    return [
        "--endpoint", url, "--workload", "long-prompt", "--num-requests", "16",
        "--rate", str(RATE), "--seed", "1", "--set", "prompt_len=uniform:200-2000",
        "--set", "output_len=48", "--vocab-size", str(VOCAB_SIZE), "--cache-protocol", "reset",
        "--metrics-interval", "0.1", "--gpu-telemetry", "off", "--out", str(out),
    ]  # fmt: skip


def _simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from prefillscope.cli import main; main()", "simulate", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.timeout(900)
def test_calibrate_on_one_budget_and_predict_another(vllm_url: str, tmp_path: Path) -> None:
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    with vllm_target(tmp_path / "server-b.log", HOLDOUT_BATCHED) as server:
        benches = [bench_process(*_bench_args(url, out)) for url, out in
                   ((vllm_url, run_a), (server.url, run_b))]  # fmt: skip
        for bench in benches:  # at the same time: the same machine for both budgets
            _, err = bench.communicate(timeout=300)
            assert bench.returncode == 0, err
    refused = _simulate("--calibrate", str(run_a))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "does not record its gpu, model, max_num_batched_tokens" in refused.stderr
    engine = [arg for item in ENGINE for arg in ("--engine", item)]
    simulate = _simulate(
        "--calibrate", str(run_a), *engine, "--holdout", str(run_b),
        "--holdout-engine", f"max_num_batched_tokens={HOLDOUT_BATCHED}",
        "--no-break-even", "--json",
    )  # fmt: skip
    assert simulate.returncode == 0, simulate.stderr
    cal = json.loads(simulate.stdout)["calibration"]
    check = cal["holdout"]
    print("\n" + json.dumps({k: cal[k] for k in ("fitted", "decode_fit", "relative_error")}))
    print(json.dumps({k: check[k] for k in ("measured", "predicted", "relative_error")}))
    # the served model's figures, read from its config.json; every fact from --engine
    assert cal["config"]["model"] == str(MODEL_DIR) and cal["requests"] == 16
    assert cal["target_sources"]["max_num_batched_tokens"] == "--engine"
    assert cal["itl_source"] in ("vllm:inter_token_latency_seconds",
                                 "vllm:time_per_output_token_seconds")  # fmt: skip
    assert cal["decode_source"].startswith("client") and cal["decode_fit"]["anchored"] is None
    assert cal["fit_targets"] == ["ttft_mean"] and 0 <= cal["transport_s"] < 0.1
    fitted = cal["fitted"]
    assert 0 < fitted["bandwidth_efficiency"] <= 1 and fitted["host_overhead_per_seq_s"] >= 0
    assert fitted["host_overhead_step_s"] >= 0  # fitted beside the decode: no step histogram
    assert MFU_RANGE[0] < fitted["prefill_mfu"] < MFU_RANGE[1]  # not pinned at a bound
    assert abs(cal["relative_error"]["ttft_mean"]) <= TOLERANCE
    assert check["max_num_batched_tokens"] == HOLDOUT_BATCHED
    for key in ("ttft_p50", "itl_p50", "itl_p99"):
        error = check["relative_error"][key]
        assert check["within_goal"][key] == (abs(error) <= check["goals"][key]), key
    for key in ("ttft_p50", "itl_p50"):
        assert abs(check["relative_error"][key]) <= GROSS_BOUND, check
