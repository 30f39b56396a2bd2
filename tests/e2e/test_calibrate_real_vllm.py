"""``simulate --calibrate`` and its held-out check on runs of the real vLLM CPU target.

A real server's run records no GPU, no chunk budget, and here a served name
(``tiny-llama``) that is no preset: the calibration is refused in one line naming the
three, and runs once they are given — ``model=`` the model's folder (its
``config.json``) and a device of its own (``gpu=custom:…``, a CPU's nominal figures,
whose efficiencies the fit finds). vLLM 0.32 exposes no step-time histogram, so the
decode (bandwidth efficiency, per-sequence and per-step host overhead) is fitted to the
client's pure-decode gaps (the efficiency kept only where the gaps decide it, else the
step's constant is its own overhead), and the prefill to the client's median TTFT from
the actual send, less the transport the server's TTFT histogram shows; the server's mean ITL is
read through the canonical ``itl`` series (either of vLLM's two names).

The held-out check: calibrate on a run at ``max_num_batched_tokens`` 512 (arm A), predict
runs of the same plan at 128 (arm B, a second server, started beside the session's). On
this shared 2-core machine the other processes move a run's TTFT by 2× from one minute
to the next (identical runs, minutes apart: TTFT p50 262 and 903 ms at load averages 4
and 14), so one run per arm compares two machines, not two budgets. The protocol makes
the machine's noise a measured figure instead of the verdict:

* **ABAB**: the arms alternate, one light run at a time (16 requests at 0.5 req/s, the
  two servers never loaded together): A1 B1 A2 B2. A drift of the machine reaches both
  arms alike;
* the fit is on A1; it predicts B1 and B2 (the held-out error: their means, predicted
  vs measured) and A2, the **same** budget it was fitted on;
* the **noise floor**, per metric, is the larger of the fit's error on A2 (what no
  model of the budget can beat: the machine moved between A1 and A2) and the spread of
  B's own repeats (B1 vs B2);
* the same figures pair by pair: the change the budget made within A1→B1 and A2→B2
  (a drift both runs of a pair share cancels; the two pairs' disagreement is this view's
  floor), predicted vs measured, judged the same way and printed beside;
* a metric **meets** the goal (±10 % TTFT p50 and ITL p50, ±25 % ITL p99) when its
  held-out error is inside it, and the goal is **shown** only where the noise floor is
  under it too; it **misses** when the error is beyond the goal by more than the floor;
  else the run cannot decide (inconclusive), and it says how many repeats per arm
  would (the floor shrinks as √n).

What is asserted is what this machine can show: every held-out error within its goal,
``GAP`` and twice the floor (a fixed bound would fail on a run whose own repeats differ
2–3×, as they did at load average 11; a floor from one pair of repeats is itself
uncertain), the TTFT change's direction, and the printed table carries the rest: the
verdicts "missed" in a run say where the model is short.

What moved the errors (recorded ABAB runs, fitted offline before and after): the decode
fit had booked 2 ms of a ~6 ms step as a slow weights' read (efficiency 0.13, which the
gaps did not decide: 0.004–0.013 ms better per gap, interval across 0), hidden under
every chunk step, so a smaller budget's extra chunk steps came out too cheap (TTFT
change 512 → 128 predicted +22 %, measured +41 %; kept as the step's overhead: +30 %);
the step jitter's end-point quantiles gave the largest stall a 1/101 share, which set
the widened ITL p99 alone (a fit run's own ITL p99 +58 %, now −5 %); the TTFT mean
followed a few stalled requests (a fit run's own TTFT p50 +80 %; the median is fitted
now). ITL p99 under chunked prefill: 12–85 of ~750 gaps carry a chunk here (1.6–11 %);
at load ~1–5 p99 sits where the chunk steps meet the machine's decode stalls, at load
~10 the pure-decode gaps' own p99 (43–83 ms) is the whole run's.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from bench_support import bench_process
from real_vllm import (
    HOLDOUT_BATCHED,
    MAX_BATCHED,
    MAX_MODEL_LEN,
    MODEL_DIR,
    VOCAB_SIZE,
    VllmServer,
)

from runfmt.calibration import Calibration, FitFigures, Holdout
from runfmt.codec import decode, encode
from runfmt.simresult import SimulateResult
from session.calibrate import MFU_RANGE, TOLERANCE

pytestmark = pytest.mark.real_vllm

#: Requests per second: 0.5 keeps the server out of overload (at 2 the 16 prompts offer
#: ~2,400 tokens/s to a server that prefills ~1,000, so TTFT is mostly the queue's).
RATE = 0.5
#: How far past its goal and twice its floor a held-out error may be. Six ABAB windows
#: after the fit's changes (three fresh runs of this test at load 8–11, three recorded
#: sets at load 5–13) left ≥ 17 points between every error and goal + 2 × floor; 0.25 before.
GAP = 0.10
#: The floor is one pair of repeats' difference, itself uncertain (the same budget's
#: error ranged 4–185 % over seven runs of this test): asserted with twice its room.
FLOOR_SPREAD = 2.0
#: Repeats per arm past which "would decide" is no plan for this machine.
MAX_REPEATS = 100
#: The held-out figures and their goals (``session.calibrate``'s).
METRICS = ("ttft_p50", "itl_p50", "itl_p99")
ENGINE = [
    f"model={MODEL_DIR}",
    "gpu=custom:peak_flops=1e12,bandwidth=5e10,memory_gib=2",
    "block_size=128",
    f"max_num_batched_tokens={MAX_BATCHED}",  # the shared server's
    "max_num_seqs=128",  # at most 16 in flight; the engine needs a budget ≥ its sequences
    f"vocab_size={VOCAB_SIZE}",
    f"max_model_len={MAX_MODEL_LEN}",
]


def _bench(url: str, out: Path) -> None:
    bench = bench_process(
        "--endpoint", url, "--workload", "long-prompt", "--num-requests", "16",
        "--rate", str(RATE), "--seed", "1", "--set", "prompt_len=uniform:200-2000",
        "--set", "output_len=48", "--vocab-size", str(VOCAB_SIZE), "--cache-protocol", "reset",
        "--metrics-interval", "0.1", "--gpu-telemetry", "off", "--out", str(out),
    )  # fmt: skip
    _, err = bench.communicate(timeout=300)
    assert bench.returncode == 0, err


def _simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from prefillscope.cli import main; main()", "simulate", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _check(fit_run: Path, held_out: Path, budget: int) -> tuple[Calibration, Holdout]:
    """``simulate --calibrate FIT --holdout HELD_OUT --json``'s calibration and its check."""
    engine = [arg for item in ENGINE for arg in ("--engine", item)]
    done = _simulate(
        "--calibrate", str(fit_run), *engine, "--holdout", str(held_out),
        "--holdout-engine", f"max_num_batched_tokens={budget}", "--no-break-even", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    calibration = decode(SimulateResult, json.loads(done.stdout)).calibration
    assert calibration is not None and calibration.holdout is not None
    return calibration, calibration.holdout


def _figure(figures: FitFigures, name: str) -> float:
    """A figure every run of this target has (TTFT and ITL: the client's)."""
    value = figures.figure(name)
    assert value is not None, name
    return value


def _error(check: Calibration | Holdout, name: str) -> float:
    """A judged figure's relative error (known: both figures are the client's)."""
    error = check.relative_error[name]
    assert error is not None, name
    return error


def judge(error: float, floor: float, goal: float) -> dict[str, Any]:
    """The held-out ``error`` against ``goal`` beside the machine's noise ``floor``."""
    if abs(error) <= goal:
        verdict = "met" if floor < goal else "met, not shown (noise floor ≥ goal)"
    elif abs(error) > goal + floor:
        verdict = "missed"
    else:
        verdict = "inconclusive"
    margin = abs(abs(error) - goal)
    repeats = None if verdict == "missed" or floor < margin else math.ceil((floor / margin) ** 2)
    out = {"error": error, "floor": floor, "goal": goal, "verdict": verdict}
    if repeats is not None and repeats > MAX_REPEATS:  # the noise, not the data, decides
        return out | {"repeats_to_decide": f"over {MAX_REPEATS}: a quieter machine"}
    return out | {"repeats_to_decide": repeats}


@pytest.mark.timeout(1200)  # two servers' start, four runs and three fits on a busy machine
def test_calibrate_on_one_budget_and_predict_another(
    vllm_url: str, vllm_holdout_server: VllmServer, tmp_path: Path
) -> None:
    runs = {name: tmp_path / name for name in ("a1", "b1", "a2", "b2")}
    for name, out in runs.items():  # ABAB, one at a time
        _bench(vllm_url if name[0] == "a" else vllm_holdout_server.url, out)
    # the refusal and the three fits are independent processes: run side by side
    with ThreadPoolExecutor(max_workers=2) as pool:
        refusing = pool.submit(_simulate, "--calibrate", str(runs["a1"]))
        checks = [
            pool.submit(_check, runs["a1"], runs[held_out], budget)
            for held_out, budget in (("b1", HOLDOUT_BATCHED), ("b2", HOLDOUT_BATCHED),
                                     ("a2", MAX_BATCHED))
        ]  # fmt: skip
        refused = refusing.result()
        fits = [check.result() for check in checks]
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "does not record its gpu, model, max_num_batched_tokens" in refused.stderr
    (cal, b1), (cal_b2, b2), (cal_a2, a2) = fits
    # the fit is deterministic: the same A1 gives the same figures at every call
    assert cal_b2.fitted == cal.fitted == cal_a2.fitted
    print("\n" + json.dumps(encode(
        {"fitted": cal.fitted, "decode_fit": cal.decode_fit, "relative_error": cal.relative_error}
    )))  # fmt: skip
    # the served model's figures, read from its config.json; every fact from --engine
    assert cal.config["model"] == str(MODEL_DIR) and cal.requests == 16
    assert cal.target_sources["max_num_batched_tokens"] == "--engine"
    assert cal.itl_source in ("vllm:inter_token_latency_seconds",
                              "vllm:time_per_output_token_seconds")  # fmt: skip
    assert cal.decode_source.startswith("client") and cal.decode_fit.anchored is None
    assert cal.fit_targets == ("ttft_p50",) and 0 <= cal.transport_s < 0.1
    fitted = cal.fitted
    assert 0 < fitted.bandwidth_efficiency <= 1 and fitted.host_overhead_per_seq_s >= 0
    # fitted beside the decode: no step histogram
    assert fitted.host_overhead_step_s is not None and fitted.host_overhead_step_s >= 0
    assert MFU_RANGE[0] < fitted.prefill_mfu < MFU_RANGE[1]  # not pinned at a bound
    assert abs(_error(cal, "ttft_p50")) <= TOLERANCE
    assert b1.max_num_batched_tokens == b2.max_num_batched_tokens == HOLDOUT_BATCHED
    assert a2.max_num_batched_tokens == MAX_BATCHED
    for check in (b1, b2, a2):  # each check is judged consistently with its own goals
        for key in METRICS:
            error = _error(check, key)
            assert check.within_goal[key] == (abs(error) <= check.goals[key]), key
    table = {}
    for key in METRICS:
        b1_measured, b2_measured = _figure(b1.measured, key), _figure(b2.measured, key)
        measured = (b1_measured + b2_measured) / 2
        predicted = (_figure(b1.predicted, key) + _figure(b2.predicted, key)) / 2
        spread = abs(b1_measured / b2_measured - 1)
        floor = max(abs(_error(a2, key)), spread)
        # the budget change itself, pair by pair (A1→B1, A2→B2): a drift both runs of a
        # pair share cancels; the pairs' disagreement is this view's noise floor
        measured_change = [b1_measured / _figure(cal.measured, key),
                           b2_measured / _figure(a2.measured, key)]  # fmt: skip
        predicted_change = _figure(b1.predicted, key) / _figure(cal.predicted, key)
        change_errors = [predicted_change / m - 1 for m in measured_change]
        table[key] = judge(predicted / measured - 1, floor, b1.goals[key]) | {
            "same_budget_error": _error(a2, key),
            "b_repeat_spread": spread,
            "change_measured": [m - 1 for m in measured_change],
            "change_predicted": predicted_change - 1,
            "change": judge(sum(change_errors) / 2, abs(change_errors[0] - change_errors[1]),
                            b1.goals[key]),
        }  # fmt: skip
    print(json.dumps(table, indent=1))
    for key, row in table.items():  # a fit on the wrong budget lands far past these
        assert abs(row["error"]) <= row["goal"] + GAP + FLOOR_SPREAD * row["floor"], (key, row)
    # TTFT p50: the smaller budget costs more, and the model says so
    ttft = table["ttft_p50"]
    assert ttft["change_predicted"] > 0 and max(ttft["change_measured"]) > 0, ttft
