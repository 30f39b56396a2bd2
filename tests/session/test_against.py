"""``simulate --against``: real inference-perf runs read, replayed and scored."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from repo_paths import FIXTURES

from perfmodel.config import EngineConfig
from session.against import replay, score_run, workload
from session.lifecycle import VLLM_FRONTEND_S, WHOLE_RUN, read_lifecycle
from workloads.errors import InputError

RUNS = FIXTURES / "ground-truth" / "training" / "default_args"
MIXTRAL = RUNS / "20260218-130541-mixtral-8x7b-v0-1-tp2-general"
LLAMA_7B = RUNS / "20260217-231439-llama-2-7b-tp1-general"
CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "simulate"]


def _short_copy(src: Path, dst: Path, seconds: float) -> Path:
    """The run with each load stage cut to ``seconds`` (its measurements kept)."""
    shutil.copytree(src, dst)
    config_file = dst / "results" / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    for stage in config["load"]["stages"]:
        stage["duration"] = seconds
    config_file.write_text(yaml.safe_dump(config))
    return dst


def test_the_run_is_read_from_the_resolved_config_and_per_token_figures() -> None:
    run = read_lifecycle(MIXTRAL)
    assert (run.model, run.tensor_parallel_size, run.max_num_batched_tokens) == (
        "mistralai/Mixtral-8x7B-v0.1",
        2,
        2048,
    )
    # results/config.yaml: 10 groups of 10 single-turn prompts (the profile asked 9 x 5
    # multi-turn), constant arrivals, 8 then 20 req/s for 600 s each
    assert (run.prompts.groups, run.prompts.prompts_per_group, run.arrivals) == (10, 10, "constant")
    assert [(s.rate, s.duration_s) for s in run.stages] == [(8.0, 600.0), (20.0, 600.0)]
    assert run.timeout_s == 300.0 and run.server_type == "vllm"
    # a vLLM server: scheduled asynchronously, and its frontend's time per request
    engine = run.engine(EngineConfig())
    assert engine.async_scheduling and engine.host_overhead_per_request_s == VLLM_FRONTEND_S
    # the client counted two tokens per streamed one: TPOT x (2n-1)/(n-1) is the stream's
    raw = json.loads((MIXTRAL / "results" / "stage_0_lifecycle_metrics.json").read_text())
    latency = raw["successes"]["latency"]
    n = run.output_len
    assert run.client_tokens_per_token == 2
    assert run.actual[0]["tpot_s"]["mean"] == pytest.approx(
        latency["time_per_output_token"]["mean"] * (2 * n - 1) / (n - 1)
    )
    stream = latency["request_latency"]["mean"] - latency["time_to_first_token"]["mean"]
    assert run.actual[0]["tpot_s"]["mean"] == pytest.approx(stream / (n - 1), rel=0.02)
    # ITL p90 of the tokens is the client's p95; its p99 (the client's p99.5) is not there
    assert run.actual[0]["itl_s"]["p90"] == latency["inter_token_latency"]["p95"]
    assert run.actual[0]["itl_s"]["p99"] is None
    assert run.actual[0]["ttft_s"]["p99"] == latency["time_to_first_token"]["p99"]


def test_a_folder_without_the_files_is_one_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        read_lifecycle(tmp_path)
    assert err.value.field == "--against" and "exp-config.yaml" in str(err.value)
    result = subprocess.run([*CLI, "--against", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--against" in result.stderr
    assert "Traceback" not in result.stderr


def test_replay_repeats_the_prompts_and_meets_the_measured_decode(tmp_path: Path) -> None:
    run = read_lifecycle(_short_copy(LLAMA_7B, tmp_path / "run", 20.0))
    config = run.engine(EngineConfig())
    timings = [t for stage in replay(run, config) for t in stage]
    assert len(timings) == 8 * 20 + 20 * 20
    assert all(len(t.token_times) == run.output_len for t in timings)
    # 100 distinct prompts cycled: after the first cycle, each prompt hits the cache
    cached = [t.num_cached_tokens for t in timings]
    assert max(cached[:100]) < run.prompts.system_len.mean and min(cached[100:]) >= 16 * 30
    result = score_run(run, EngineConfig())
    rows = {(s.stage, s.metric, s.stat): s for s in result.scores}
    # the roofline's decode step on an H100 lands within 15 % of the measured stream
    for stage in (0, 1):
        assert abs(rows[(stage, "itl_s", "mean")].error) < 0.15
        assert abs(rows[(stage, "tpot_s", "mean")].error) < 0.15
    assert rows[(WHOLE_RUN, "itl_s", "p99")].actual is None


def test_simulate_against_prints_json_with_bench_statistics(tmp_path: Path) -> None:
    folder = _short_copy(MIXTRAL, tmp_path / "run", 10.0)
    result = subprocess.run(
        [*CLI, "--against", str(folder), "--json"], capture_output=True, text=True, check=True
    )
    out = json.loads(result.stdout)
    assert out["tensor_parallel_size"] == 2 and out["requests"] == 280
    # the vLLM server's scheduling and frontend, as replayed, are said
    assert out["async_scheduling"] is True
    assert out["host_overhead_per_request_s"] == VLLM_FRONTEND_S
    for conf in out["configurations"]:
        for metric in ("ttft_s", "itl_s", "tpot_s", "e2e_s"):
            assert {"mean", "p50", "p90", "p99", "max"} <= set(conf[metric])
            assert conf[metric]["max"] >= conf[metric]["p99"] >= conf[metric]["p50"] > 0
    stages = {s["stage"] for s in out["scores"]}
    assert stages == {WHOLE_RUN, 0, 1}
    # three draws of the client's randomness by default: each figure's range spans them
    assert (out["draws"], out["seed"]) == (3, 0)
    known = [s for s in out["scores"] if s["predicted"] is not None]
    assert all(s["low"] <= s["predicted"] <= s["high"] for s in known)
    assert any(s["low"] < s["high"] for s in known)  # the arrivals are random
    for flag, value in (("--draws", "0"), ("--seed", "-5")):  # checked before any replay
        refused = subprocess.run(
            [*CLI, "--against", str(folder), flag, value], capture_output=True, text=True
        )
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert flag in refused.stderr and "Traceback" not in refused.stderr


def test_the_draws_are_other_seeds_and_one_draw_is_its_own_range(tmp_path: Path) -> None:
    run = read_lifecycle(_short_copy(LLAMA_7B, tmp_path / "run", 10.0))
    one = score_run(run, EngineConfig(), seed=1)
    three = score_run(run, EngineConfig(), seed=0, draws=3)
    assert (one.draws, three.draws) == (1, 3)
    assert all(s.low == s.predicted == s.high for s in one.scores if s.predicted is not None)
    # seed 1's replay is one of the three draws: inside each range
    for a, b in zip(one.scores, three.scores, strict=True):
        if a.predicted is not None:
            assert b.low <= a.predicted <= b.high


def test_the_run_budget_reaches_the_scheduler_and_binds_only_under_the_prompt(
    tmp_path: Path,
) -> None:
    """The Mixtral budget triple (1024 / 2048 / 8192) replays alike because its
    ~571-token prompts (most of them cached after the first 100) seldom fill a step's
    budget beside its decodes: 2048 and 8192 never, 1024 only where a burst of the
    client's random arrivals brings two uncached prompts into one step. Under the prompt
    (256) the budget sets the schedule: steps fill it, prompts take several chunks, TTFT
    grows."""
    import dataclasses

    run = read_lifecycle(_short_copy(MIXTRAL, tmp_path / "run", 20.0))
    results = {}
    for budget in (256, 1024, 2048, 8192):
        budgeted = dataclasses.replace(run, max_num_batched_tokens=budget)
        results[budget] = score_run(budgeted, EngineConfig(gpu="h100-sxm"))
        assert results[budget].max_num_batched_tokens == budget
    ttft = {b: r.configurations[0].statistic("ttft_s", "mean") for b, r in results.items()}
    assert results[2048].budget_bound_steps == results[8192].budget_bound_steps == 0
    assert results[8192].steps == results[2048].steps and ttft[8192] == ttft[2048]
    assert results[1024].budget_bound_steps < 0.01 * results[1024].steps
    assert ttft[1024] == pytest.approx(ttft[2048], rel=0.02)
    assert results[256].budget_bound_steps > 0.05 * results[256].steps
    assert ttft[256] > 1.05 * ttft[2048]  # +12 % when written: each prompt in 2–4 chunks


def test_the_vllm_frontend_figure_is_the_light_stages_unexplained_ttft(tmp_path: Path) -> None:
    """``VLLM_FRONTEND_S`` is what its docstring derives from the fixtures, with no cost
    model: per run not overloaded (its TTFT under a second), at its lightest stage,
    TTFT - 2.5 ITL (a cached prompt's step, the step scheduled ahead, half a step of wait),
    the median over the runs; a run of another server type gets none."""
    residuals = []
    for folder in sorted(RUNS.iterdir()):
        run = read_lifecycle(folder)
        light = run.actual[0]
        if light["ttft_s"]["mean"] < 1.0:
            residuals.append(light["ttft_s"]["mean"] - 2.5 * light["itl_s"]["mean"])
    assert len(residuals) == 12
    assert sorted(residuals)[0] > 0.006  # every run's frontend took time
    assert float(np.median(residuals)) == pytest.approx(VLLM_FRONTEND_S, abs=5e-5)
    other = shutil.copytree(LLAMA_7B, tmp_path / "other")
    config_file = other / "results" / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    config["server"]["type"] = "tgi"
    config_file.write_text(yaml.safe_dump(config))
    engine = read_lifecycle(other).engine(EngineConfig())
    assert engine.host_overhead_per_request_s == 0.0 and not engine.async_scheduling


def test_a_model_no_preset_knows_is_refused_then_given_by_its_config(tmp_path: Path) -> None:
    """The run's model is an id no preset knows: one line naming ``--engine model`` and
    the fix; given as its ``config.json`` folder, the replay runs on it (``--engine``
    settings win over the run's)."""
    folder = _short_copy(LLAMA_7B, tmp_path / "run", 3.0)
    server = folder / "exp-config.yaml"
    server.write_text(server.read_text().replace("meta-llama/Llama-2-7b-hf", "acme/Zephyr-9B"))
    refused = subprocess.run([*CLI, "--against", str(folder)], capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "--engine model" in refused.stderr and "acme/Zephyr-9B" in refused.stderr
    model = tmp_path / "zephyr"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
        "num_hidden_layers": 36, "num_key_value_heads": 8, "vocab_size": 32000,
        "torch_dtype": "bfloat16",
    }))  # fmt: skip
    done = subprocess.run(
        [*CLI, "--against", str(folder), "--engine", f"model={model}", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["model"] == str(model) and out["requests"] == 8 * 3 + 20 * 3


def test_vllm_spellings_of_the_server_figures_and_a_missing_budget(tmp_path: Path) -> None:
    """``exp-config.yaml`` may spell the server's figures as vLLM's arguments or flags; a
    budget it does not record is refused in one line until ``--engine`` gives it."""
    folder = _short_copy(LLAMA_7B, tmp_path / "run", 3.0)
    server = folder / "exp-config.yaml"
    server.write_text(yaml.safe_dump({
        "model": "meta-llama/Llama-2-7b-hf", "tensor-parallel-size": 2, "max_num_seqs": 64,
        "max-model-len": 8192,
    }))  # fmt: skip
    run = read_lifecycle(folder)
    assert (run.tensor_parallel_size, run.max_num_seqs, run.max_model_len) == (2, 64, 8192)
    with pytest.raises(InputError) as err:
        run.engine(EngineConfig())
    assert err.value.field == "--engine max_num_batched_tokens"
    refused = subprocess.run([*CLI, "--against", str(folder)], capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "--engine max_num_batched_tokens=N" in refused.stderr
    given = run.engine(EngineConfig(max_num_batched_tokens=1024), {"max_num_batched_tokens"})
    assert (given.max_num_batched_tokens, given.tensor_parallel_size) == (1024, 2)
    server.write_text(yaml.safe_dump({"model": "meta-llama/Llama-2-7b-hf",
                                      "tensor_parallel_size": "two"}))  # fmt: skip
    bad = subprocess.run([*CLI, "--against", str(folder)], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "tensor_parallel_size is 'two'" in bad.stderr and "Traceback" not in bad.stderr


def test_data_parallel_replicas_and_recorded_engine_settings(tmp_path: Path) -> None:
    """``exp-config.yaml``'s data parallelism deals the requests over that many engines, each
    with its own prefix cache; its memory utilization and prefix caching reach the engine."""
    folder = _short_copy(LLAMA_7B, tmp_path / "run", 5.0)
    server = folder / "exp-config.yaml"
    config = yaml.safe_load(server.read_text())
    one = read_lifecycle(folder)
    server.write_text(yaml.safe_dump(config | {"data_parallel_size": 2}))
    two = read_lifecycle(folder)
    assert (one.data_parallel_size, two.data_parallel_size) == (1, 2)
    # each stage's requests dealt round-robin; a replica's cache holds only what it served
    first = [r for _, r in workload(one, 32000)[0][:30]]
    system = [req.prompt_token_ids[:100].tobytes() for req in first]
    for run in (one, two):
        n = run.data_parallel_size
        timings = replay(run, run.engine(EngineConfig()))[0][:30]
        for i, timing in enumerate(timings):
            seen = system[i] in system[i % n : i : n]  # earlier, on the same replica
            assert (timing.num_cached_tokens >= 96) == seen, (n, i)
    assert any(system[i] in system[:i] and system[i] not in system[i % 2 : i : 2]
               for i in range(30))  # fmt: skip
    result = score_run(two, EngineConfig())
    assert result.data_parallel_size == 2 and result.requests == 8 * 5 + 20 * 5
    server.write_text(yaml.safe_dump(config | {"gpu_memory_utilization": 0.5,
                                               "enable_prefix_caching": False}))  # fmt: skip
    engine = read_lifecycle(folder).engine(EngineConfig())
    assert engine.gpu_memory_utilization == 0.5 and engine.enable_prefix_caching is False
    server.write_text(yaml.safe_dump(config | {"gpu_memory_utilization": 90}))
    with pytest.raises(InputError) as err:
        read_lifecycle(folder)
    assert "gpu_memory_utilization is 90" in str(err.value)
