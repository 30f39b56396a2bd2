"""``diagnose.next_steps``: the command a finding recommends replays the run's workload
with one thing changed, and ``prefillscope bench`` accepts it."""

from __future__ import annotations

import shlex

from bench_support import bench_cli
from rundirs import write_run

from diagnose.inputs import load_run_view
from diagnose.next_steps import (
    MIN_CHUNK,
    SMALL_CHUNK,
    ab_command,
    bench_command,
    chunk_pair,
    smaller_budget,
    workload_flags,
)
from workloads.spec import load_spec


def _view(tmp_path, workload: dict, target: dict):
    return load_run_view(write_run(tmp_path / "run", info={"workload": workload,
                                                          "target": target}))  # fmt: skip


EMBEDDED = {"flavour": "embedded", "engine": {"max_num_batched_tokens": 512, "block_size": 16}}


def test_workload_flags_replay_name_seed_load_and_only_the_changed_parameters(tmp_path):
    spec = load_spec("long-prompt", {"rate": 2.5, "num_requests": 8, "prompt_len": 4096,
                                     "seed": 3}).to_dict()  # fmt: skip
    view = _view(tmp_path, spec, EMBEDDED)
    assert workload_flags(view) == [
        "--workload", "long-prompt", "--seed", "3", "--num-requests", "8", "--rate", "2.5",
        "--set", "prompt_len=4096",
    ]  # fmt: skip
    assert workload_flags(view, load={"rate": 1.0})[7] == "1"


def test_a_run_without_a_recorded_workload_gets_a_placeholder(tmp_path):
    assert workload_flags(_view(tmp_path, {}, EMBEDDED)) == ["--workload", "WORKLOAD"]


def test_the_recommended_bench_command_runs(tmp_path):
    spec = load_spec("long-prompt", {"rate": 2.0, "num_requests": 4, "prompt_len": 256,
                                     "output_len": 4}).to_dict()  # fmt: skip
    command = bench_command(_view(tmp_path, spec, EMBEDDED), engine={"max_num_batched_tokens": 256})
    argv = shlex.split(command)
    assert argv[:2] == ["prefillscope", "bench"]
    assert argv[-2:] == ["--engine", "max_num_batched_tokens=256"]
    done = bench_cli(*argv[2:], "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_an_external_servers_ab_launches_it_with_each_chunk_and_a_rerun_names_its_url(tmp_path):
    spec = load_spec("long-prompt").to_dict()
    view = _view(tmp_path, spec, {"flavour": "vllm", "model": "org/m", "url": "http://h:8000"})
    ab = shlex.split(ab_command(view, [2048, 512, 512]))
    assert ab[:5] == ["prefillscope", "diagnose", "ab", "--chunks", "512,2048"]
    launch = "vllm serve org/m --max-num-batched-tokens {chunk} --port {port}"
    assert ab[-2:] == ["--launch", launch]
    assert bench_command(view).endswith("--endpoint http://h:8000")


def test_chunk_sizes_proposed_are_always_smaller_than_the_budget():
    assert smaller_budget(8192) == 2048 and smaller_budget(1024) == SMALL_CHUNK
    assert smaller_budget(256) == 128 and smaller_budget(100) == MIN_CHUNK
    assert smaller_budget(MIN_CHUNK) == MIN_CHUNK
    assert chunk_pair(None) == (SMALL_CHUNK, 4 * SMALL_CHUNK)
    assert chunk_pair(8192) == (SMALL_CHUNK, 8192) and chunk_pair(256) == (128, 256)
    assert chunk_pair(MIN_CHUNK) == (MIN_CHUNK, 4 * MIN_CHUNK)
