"""``simulate --against``: the prompts of an inference-perf run, however its version wrote them.

What fails if the reader broke: a configuration written under inference-perf's aliases
or with distributions for its lengths read as a traceback or as the wrong prompts, or a
run whose prompts cannot be rebuilt (another generator, multi-turn chat) replayed as if
it were a single-turn shared-prefix one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from repo_paths import FIXTURES

from perfmodel.config import EngineConfig
from session.against import STAGE_START_S, replay, workload
from session.lifecycle import read_lifecycle
from session.lifecycle_load import stage_arrivals
from session.lifecycle_prompts import length
from workloads.distributions import Constant, LogNormal, Normal, Poisson, SkewNormal, Uniform
from workloads.errors import InputError

RUNS = FIXTURES / "ground-truth" / "training" / "default_args"
RUN = RUNS / "20260217-231439-llama-2-7b-tp1-general"
CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "simulate"]


def _copy(dst: Path, seconds: float = 3.0, load: dict | None = None, **prefix: Any) -> Path:
    """The run with short stages, its ``load`` entries updated with ``load`` and its
    ``data.shared_prefix`` entries replaced (a ``None`` value removes the entry)."""
    shutil.copytree(RUN, dst)
    config_file = dst / "results" / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    for stage in config["load"]["stages"]:
        stage["duration"] = seconds
    config["load"].update(load or {})
    shared = config["data"]["shared_prefix"]
    for key, value in prefix.items():
        if value is None:
            shared.pop(key, None)
        else:
            shared[key] = value
    config_file.write_text(yaml.safe_dump(config))
    return dst


def test_the_alias_spellings_read_as_the_same_run(tmp_path: Path) -> None:
    plain = read_lifecycle(_copy(tmp_path / "plain"))
    aliased = read_lifecycle(
        _copy(tmp_path / "aliased", num_groups=None, num_prompts_per_group=None,
              num_unique_system_prompts=10, num_users_per_system_prompt=10)
    )  # fmt: skip
    assert aliased.prompts == plain.prompts
    assert (plain.prompts.groups, plain.prompts.prompts_per_group) == (10, 10)
    config = plain.engine(EngineConfig())
    a, b = replay(plain, config), replay(aliased, config)
    assert [[t.e2e_s for t in stage] for stage in a] == [[t.e2e_s for t in stage] for stage in b]


def test_distribution_lengths_are_drawn_once_per_prompt(tmp_path: Path) -> None:
    question = {"type": "normal", "mean": 400, "std_dev": 80, "min": 200, "max": 600}
    output = {"type": "uniform", "min": 20, "max": 60}
    run = read_lifecycle(_copy(tmp_path / "run", 15.0, question_len=question, output_len=output))
    assert run.prompts.question_len == Normal(400, 80, run.prompts.question_len.clip)
    assert run.prompts.output_len == Uniform(20, 60)
    assert run.output_len == 40
    n = run.prompts.prompts
    stages = [[r for _, r in stage] for stage in workload(run, 32000)]
    assert [len(s) for s in stages] == [8 * 15, 20 * 15]
    requests = [r for stage in stages for r in stage]
    # the client's template tokens: what the measured mean adds to the configured one
    extra = round(run.prompt_len - run.prompts.mean_len)
    assert extra > 0
    first = stages[0][:n]  # one pass over the (shuffled) prompts
    own = np.array([len(r.prompt_token_ids) for r in first]) - 100
    assert own.min() >= 200 + extra and own.max() <= 600 + extra
    assert own.std() > 40 and abs(own.mean() - (400 + extra)) < 25
    outputs = np.array([r.max_tokens for r in first])
    assert outputs.min() >= 20 and outputs.max() <= 60 and len(set(outputs)) > 10
    # each stage goes through the same prompts from the first; a prompt keeps its lengths
    for stage in stages:
        for j, req in enumerate(stage):
            assert req.max_tokens == first[j % n].max_tokens
            assert np.array_equal(req.prompt_token_ids, first[j % n].prompt_token_ids)
    # ten groups of ten prompts share a system prompt each, and only that
    groups: dict[bytes, int] = {}
    for req in first:
        key = req.prompt_token_ids[:100].tobytes()
        groups[key] = groups.get(key, 0) + 1
    assert sorted(groups.values()) == [10] * 10
    assert len({r.prompt_token_ids[:101].tobytes() for r in first}) == n
    # the replay streams each request's own output length
    timings = [t for stage in replay(run, run.engine(EngineConfig())) for t in stage]
    assert [len(t.token_times) for t in timings] == [r.max_tokens for r in requests]


def test_a_legacy_distribution_applies_to_a_numeric_length(tmp_path: Path) -> None:
    legacy = {"type": "fixed", "mean": 300}
    run = read_lifecycle(_copy(tmp_path / "run", question_len=447, question_distribution=legacy))
    assert run.prompts.question_len == Constant(300)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (448, Constant(448)),
        ({"type": "fixed", "mean": 250.7}, Constant(250)),
        ({"type": "normal", "mean": 300, "std_dev": 0}, Constant(300)),
        ({"type": "lognormal", "mean": 300, "std_dev": 100, "min": 1, "max": 900}, LogNormal),
        ({"type": "poisson", "mean": 30}, Poisson),
        ({"type": "skew_normal", "mean": 300, "std_dev": 50, "skew": 3}, SkewNormal),
        ({"mean": 300, "variance": 400}, Normal),  # the default type; std_dev from variance
    ],
)
def test_inference_perf_distributions(value: Any, expected: Any) -> None:
    dist = length(value, "question_len", Path("c.yaml"), "--against")
    if isinstance(expected, type):
        assert isinstance(dist, expected)
        draws = dist.sample_int(np.random.default_rng(0), 50_000)
        low = value.get("min", 10)
        high = value.get("max", 1024)
        assert draws.min() >= low and draws.max() <= high  # inference-perf's defaults clip
        assert draws.mean() == pytest.approx(dist.mean, rel=0.02)
    else:
        assert dist == expected
    if value == {"mean": 300, "variance": 400}:
        assert dist == Normal(300, 20, dist.clip)


@pytest.mark.parametrize(
    "value",
    [{"type": "zipf", "mean": 3}, {"min": 50, "max": 10}, {"mean": "many"}, -5, "long",
     float("inf"), {"mean": float("nan")},
     {"type": "lognormal", "mean": 0, "std_dev": 3}],
)  # fmt: skip
def test_a_bad_length_is_one_input_error(value: Any) -> None:
    with pytest.raises(InputError) as err:
        length(value, "data.shared_prefix.question_len", Path("c.yaml"), "--against")
    assert err.value.field == "--against" and "question_len" in str(err.value)


def _refused(folder: Path) -> str:
    result = subprocess.run([*CLI, "--against", str(folder)], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "--against" in result.stderr
    return result.stderr


def test_a_sweep_replays_the_stages_its_files_record(tmp_path: Path) -> None:
    """A sweep's generated stages are not in the resolved configuration: their rates are
    in the stage files (``load_summary.requested_rate``), their length is the sweep's."""
    sweep = {"stages": [], "sweep": {"type": "linear", "stage_duration": 4}}
    run = read_lifecycle(_copy(tmp_path / "sweep", load=sweep))
    assert [(s.rate, s.duration_s) for s in run.stages] == [(8.0, 4.0), (20.0, 4.0)]
    assert sorted(run.actual) == [-1, 0, 1]
    default = read_lifecycle(_copy(tmp_path / "default", load={"sweep": {"type": "linear"}}))
    assert [s.duration_s for s in default.stages] == [180.0, 180.0]


def _most_in_flight(timings: list) -> int:
    events = sorted(
        [(t.arrival_s, 1) for t in timings] + [(t.arrival_s + t.e2e_s, -1) for t in timings]
    )
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_a_concurrent_run_is_a_closed_loop_per_stage(tmp_path: Path) -> None:
    """``load.type: concurrent``: each stage keeps at most ``concurrency_level`` requests
    in flight, sends the next as one ends, and starts once the one before it drained."""
    stages = [{"num_requests": 40, "concurrency_level": 4},
              {"num_requests": 60, "concurrency_level": 12}]  # fmt: skip
    run = read_lifecycle(_copy(tmp_path / "run", load={"type": "concurrent", "stages": stages}))
    assert [(s.requests, s.concurrency) for s in run.stages] == [(40, 4), (60, 12)]
    for dp in (1, 2):
        run.data_parallel_size = dp
        first, second = replay(run, run.engine(EngineConfig()))
        assert (len(first), len(second)) == (40, 60)
        assert all(t.error is None and t.e2e_s for t in first + second)
        assert (_most_in_flight(first), _most_in_flight(second)) == (4, 12)
        if dp == 1:  # one engine's closed loop: after the first four, a send is an end
            ends = {round(t.arrival_s + t.e2e_s, 9) for t in first}
            sends = sorted(t.arrival_s for t in first)
            assert all(round(s, 9) in ends for s in sends[4:])
        drained = max(t.arrival_s + t.e2e_s for t in first)
        assert min(t.arrival_s for t in second) > drained + run.stage_interval_s


def test_the_clients_own_cap_on_requests_in_flight(tmp_path: Path) -> None:
    """An open-loop stage meets the client's num_workers x worker_max_concurrency permits:
    past them a request waits for one to end (sent late, timed from its send)."""
    permits = {"num_workers": 2, "worker_max_concurrency": 5}
    capped = read_lifecycle(_copy(tmp_path / "capped", 5.0, load=permits))
    free = read_lifecycle(_copy(tmp_path / "free", 5.0))
    assert [s.concurrency for s in capped.stages] == [10, 10]
    assert [s.concurrency for s in free.stages] == [None, None]  # 224 x 100 permits
    late, on_time = (replay(r, r.engine(EngineConfig()))[1] for r in (capped, free))
    assert _most_in_flight(late) == 10 and _most_in_flight(on_time) > 10
    # what waited was sent later than scheduled, so the stage's sends spread longer
    assert max(t.arrival_s for t in late) > max(t.arrival_s for t in on_time) + 2


def test_loads_the_replay_cannot_send_are_refused(tmp_path: Path) -> None:
    trace = {"type": "trace_replay", "trace": {"file": "t.jsonl"}}
    assert "load.type 'trace_replay'" in _refused(_copy(tmp_path / "trace", load=trace))
    closed = {"type": "concurrent", "stages": [{"num_requests": 100, "rate": 5}]}
    assert "concurrency_level" in _refused(_copy(tmp_path / "closed", load=closed))
    sweep = {"stages": [], "sweep": {"type": "linear"}}
    folder = _copy(tmp_path / "sweep", load=sweep)
    for file in (folder / "results").glob("stage_*"):
        file.unlink()
    assert "sweep" in _refused(folder)
    bad = {"stages": [{"rate": "fast", "duration": 60}]}
    assert "load.stages[0]" in _refused(_copy(tmp_path / "bad", load=bad))


def test_runs_whose_prompts_the_files_cannot_rebuild_are_refused(tmp_path: Path) -> None:
    other = _copy(tmp_path / "random")
    config_file = other / "results" / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    config["data"]["type"] = "random"
    config_file.write_text(yaml.safe_dump(config))
    assert "data.type 'random'" in _refused(other)
    chat = _copy(tmp_path / "chat", enable_multi_turn_chat=True)
    assert "enable_multi_turn_chat" in _refused(chat)
    bad = _copy(tmp_path / "bad", output_len={"type": "zipf"})
    assert "output_len.type" in _refused(bad)
    missing = _copy(tmp_path / "missing", num_groups=None)
    assert "num_groups" in _refused(missing)


def test_stage_arrivals_are_inference_perf_timers(tmp_path: Path) -> None:
    """``constant`` is not evenly spaced: inference-perf draws exponential gaps and scales
    them to fill the stage; ``poisson`` spreads a Poisson count over each second."""
    run = read_lifecycle(_copy(tmp_path / "run", 600.0))
    constant = stage_arrivals(run.stages, run.arrivals, seed=5)
    assert [len(t) for t in constant] == [8 * 600, 20 * 600]
    for times, stage in zip(constant, run.stages, strict=True):
        gaps = np.diff(np.concatenate([[0.0], times]))
        assert times[-1] == pytest.approx(stage.duration_s)  # scaled to fill the stage
        assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential
        counts = np.bincount(times.astype(int), minlength=600)[:600]
        assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.15)  # Poisson counts
    again = stage_arrivals(run.stages, run.arrivals, seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(constant, again, strict=True))
    run.arrivals = "poisson"
    poisson = stage_arrivals(run.stages, run.arrivals, seed=5)
    assert [len(t) for t in poisson] == [8 * 600, 20 * 600]
    for times in poisson:
        assert np.all(np.diff(times) > 0)
        counts = np.bincount(times.astype(int))
        assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.15)


def test_a_stage_starts_once_the_one_before_has_drained(tmp_path: Path) -> None:
    """The client waits for every request of a stage to end, then ``load.interval``, then
    a second, before the next stage's first send; a stage too short for one request
    does not stall the run."""
    for interval in (1.0, 6.0):
        run = read_lifecycle(_copy(tmp_path / f"i{interval}", 5.0, load={"interval": interval}))
        assert run.stage_interval_s == interval
        first, second = replay(run, run.engine(EngineConfig()))
        drained = max(t.arrival_s + t.e2e_s for t in first)
        start = drained + interval + STAGE_START_S
        assert start < min(t.arrival_s for t in second) < start + 1.0
    stages = [{"rate": 0.5, "duration": 1}, {"rate": 8, "duration": 2}]
    run = read_lifecycle(_copy(tmp_path / "empty", load={"stages": stages}))
    empty, later = replay(run, run.engine(EngineConfig()))
    assert len(empty) == 0 and len(later) == 16 and all(t.e2e_s for t in later)
    with pytest.raises(InputError):
        read_lifecycle(_copy(tmp_path / "bad", load={"interval": -1}))
