"""``simulate --calibrate`` and its held-out check on runs of the real vLLM CPU target.

The cost model describes the server from what it serves: ``model=`` the model's folder
(its ``config.json``) and a device of its own (``gpu=custom:…``, a CPU's nominal figures,
whose efficiencies the fit finds). vLLM 0.32 exposes no step-time histogram, so the
decode (bandwidth efficiency, per-sequence overhead) is fitted to the client's
pure-decode gaps alone, and the prefill to the client's mean TTFT.

The held-out check: calibrate on a run at ``max_num_batched_tokens`` 512, predict a run of
the same plan at 128 (a second server), run it, and print the error per metric. The goal
is 10 % on TTFT p50, ITL p50 and ITL p99. It is not met; what is asserted is that the
check is computed and reported consistently and that the ITL p50 is within
``ITL_P50_BOUND`` (gross breakage, not the goal). Measured on the shared 2-core machine
(held-out errors, predicted vs measured):

* rate 0.5: TTFT p50 +11.4 %, ITL p50 +41.9 %, ITL p99 +13.2 % (the fit's own run: ITL
  p50 +12.5 %; the decode regression's median |error| 29 % over 707 gaps);
* rate 2 (overloaded: ~2,400 prompt tokens/s offered to ~1,000 served, TTFT mostly
  queue): TTFT p50 +23.1 %, ITL p50 +18.4 %, ITL p99 −0.2 %.

The ITL p99 of a 16-request run is its ~8th largest gap of ~700, on the cliff between
plain decode steps and the ones that carry a prefill chunk, and the shared machine's
stalls move it from run to run (41, 60 and 69 ms over three identical runs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_support import bench_cli
from real_vllm import MAX_MODEL_LEN, MODEL_DIR, VOCAB_SIZE, vllm_target

from session.calibrate import MFU_RANGE, TOLERANCE

pytestmark = pytest.mark.real_vllm

#: How far the held-out run's ITL p50 may be from predicted: a bound for gross breakage
#: (the docstring's measured errors), not the 10 % goal.
ITL_P50_BOUND = 0.6
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


def _run(url: str, out: Path) -> None:
    done = bench_cli(
        "--endpoint", url, "--workload", "long-prompt", "--num-requests", "16",
        "--rate", str(RATE), "--seed", "1", "--set", "prompt_len=uniform:200-2000",
        "--set", "output_len=48", "--vocab-size", str(VOCAB_SIZE), "--cache-protocol", "reset",
        "--metrics-interval", "0.1", "--gpu-telemetry", "off", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.timeout(900)
def test_calibrate_on_one_budget_and_predict_another(vllm_url: str, tmp_path: Path) -> None:
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    _run(vllm_url, run_a)
    with vllm_target(tmp_path / "server-b.log", HOLDOUT_BATCHED) as server:
        _run(server.url, run_b)
    engine = [arg for item in ENGINE for arg in ("--engine", item)]
    simulate = subprocess.run(
        [sys.executable, "-c", "from prefillscope.cli import main; main()", "simulate",
         "--calibrate", str(run_a), *engine, "--holdout", str(run_b),
         "--holdout-engine", f"max_num_batched_tokens={HOLDOUT_BATCHED}",
         "--no-break-even", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert simulate.returncode == 0, simulate.stderr
    cal = json.loads(simulate.stdout)["calibration"]
    check = cal["holdout"]
    print("\n" + json.dumps({k: cal[k] for k in ("fitted", "decode_fit", "relative_error")}))
    print(json.dumps({k: check[k] for k in ("measured", "predicted", "relative_error")}))
    # the served model's figures, read from its config.json
    assert cal["config"]["model"] == str(MODEL_DIR) and cal["requests"] == 16
    assert cal["decode_source"].startswith("client") and cal["decode_fit"]["anchored"] is None
    fitted = cal["fitted"]
    assert 0 < fitted["bandwidth_efficiency"] <= 1 and fitted["host_overhead_per_seq_s"] >= 0
    assert MFU_RANGE[0] < fitted["prefill_mfu"] < MFU_RANGE[1]  # not pinned at a bound
    assert abs(cal["relative_error"]["ttft_mean"]) <= TOLERANCE
    assert check["max_num_batched_tokens"] == HOLDOUT_BATCHED
    for key in ("ttft_p50", "itl_p50", "itl_p99"):
        error = check["relative_error"][key]
        assert check["within_goal"][key] == (abs(error) <= check["goal"]), key
    assert abs(check["relative_error"]["itl_p50"]) <= ITL_P50_BOUND, check
