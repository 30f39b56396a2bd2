"""``prefillscope bench`` as a user types it: bad input, secrets, the run directory, time bounds.

Bad input is one line on stderr and exit status 2, before anything is sent or written.
An API key never reaches a file of the run, nor the screen.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from bench_support import bench, bench_cli, read_json, requests_table
from oracle_races import assert_cached_as_expected
from probe_servers import ReplayServer

from perfmodel.config import EngineConfig
from prefillscope.cli import main
from simengine.embedded import EmbeddedServer

FAST = ("--engine", "fixed_step_s=0.002", "--gpu-telemetry", "off")
SECRET = "sk-test-0123456789-SECRET"


@pytest.fixture(scope="module")
def engine() -> Iterator[EmbeddedServer]:
    """An embedded engine reached as an external endpoint."""
    with EmbeddedServer(EngineConfig(fixed_step_s=0.002)) as server:
        yield server


def bench_here(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str):
    """The command in this process (bad input fails before anything starts)."""
    monkeypatch.setattr(sys, "argv", ["prefillscope", "bench", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    out = capsys.readouterr()
    return SimpleNamespace(returncode=exited.value.code, stdout=out.out, stderr=out.err)


def _one_line_error(done, field: str) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"prefillscope: error: {field}"), lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("args", "field", "says"),
    [
        (("--workload", "no-such-workload"), "workload", "known:"),
        (("--workload", "shared-prefix", "--set", "prefix_len=uniform:500-100"), "prefix_len", ""),
        (("--workload", "system-prompt", "--rate", "0"), "--rate", "must be > 0"),
        (("--workload", "system-prompt", "--concurrency", "4", "--rate", "2"), "--concurrency", ""),
        (("--workload", "system-prompt", "--engine", "gpus=2"), "--engine", "unknown engine"),
        (("--workload", "system-prompt", "--engine", "time_scale=fast"), "--engine", "number"),
        (("--workload", "system-prompt", "--slo", "ttft=soon"), "--slo", "not a duration"),
        (
            ("--workload", "system-prompt", "--endpoint", "http://127.0.0.1:9"),
            "--endpoint",
            "cannot reach",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    field: str,
    says: str,
) -> None:
    done = bench_here(monkeypatch, capsys, *args, "--out", str(tmp_path / "run"))
    line = _one_line_error(done, field)
    assert says in line
    assert not (tmp_path / "run").exists()  # nothing written


def test_a_trace_line_that_is_not_json_is_named(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    good = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
    trace.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n{not json\n")
    done = bench_cli("--workload", f"trace:{trace}", "--out", str(tmp_path / "run"))
    line = _one_line_error(done, "workload")
    assert "line 3" in line


#: What vLLM's /v1/models says of a model: no vocabulary size.
VLLM_MODELS = json.dumps(
    {"object": "list", "data": [{"id": "tiny-llama", "object": "model", "owned_by": "vllm",
                                 "max_model_len": 4096}]}
)  # fmt: skip


def test_an_endpoint_without_a_vocabulary_size_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with ReplayServer([VLLM_MODELS], path="/v1/models") as vllm_like:
        done = bench_here(
            monkeypatch, capsys, "--workload", "system-prompt", "--endpoint", vllm_like.url,
            "--out", str(tmp_path / "run"),
        )  # fmt: skip
    assert "--vocab-size N" in _one_line_error(done, "--vocab-size")
    assert not (tmp_path / "run").exists()


def test_a_folder_holding_a_run_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{}")
    done = bench_here(
        monkeypatch, capsys, "--workload", "system-prompt", *FAST, "--out", str(tmp_path / "run")
    )
    _one_line_error(done, "--out")
    assert (tmp_path / "run" / "run.json").read_text() == "{}"


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_api_key_never_reaches_the_run_or_the_screen(
    tmp_path: Path, engine: EmbeddedServer, how: str
) -> None:
    run = tmp_path / "run"
    key = ("--api-key", SECRET) if how == "flag" else ()
    env = {**os.environ, "PREFILLSCOPE_API_KEY": SECRET} if how == "env" else None
    done = bench_cli(
        "--workload", "system-prompt", "--num-requests", "6", "--rate", "20",
        "--endpoint", engine.url, "--vocab-size", "32000", *key, "--gpu-telemetry", "off",
        "--out", str(run), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    for path in run.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path.name
    info = read_json(run, "run.json")
    assert info["target"]["authenticated"] is True
    if how == "flag":
        assert info["command"][info["command"].index("--api-key") + 1] == "REDACTED"


def test_the_run_directory(tmp_path: Path) -> None:
    done = bench_cli(
        "--workload", "few-shot", "--num-requests", "12", "--rate", "20", "--seed", "7",
        "--slo", "ttft=500,itl=50ms", *FAST, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = (tmp_path / "runs").iterdir()  # runs/<UTC timestamp>-<workload>
    assert run.name.endswith("Z-few-shot")
    for table in ("requests", "chunks", "client", "server_metrics", "gpu"):
        assert (run / f"{table}.parquet").exists(), table
    info = read_json(run, "run.json")
    assert info["status"] == "complete" and info["reason"] is None
    assert info["workload"]["workload"] == "few-shot" and info["workload"]["seed"] == 7
    assert info["seed"] == 7 and info["clock"]["wall_t0"] > 1.6e9
    assert info["target"]["embedded"] is True and info["target"]["flavour"] == "embedded"
    assert info["target"]["engine"]["fixed_step_s"] == 0.002
    assert info["target"]["engine"]["kv_pool_blocks"] > 10_000  # resolved from GPU memory
    metrics = info["probes"]["server_metrics"]
    assert metrics["flavour"] == "embedded" and metrics["status"]["state"] == "ok"
    assert metrics["interval_s"] == 0.5
    assert info["probes"]["gpu"]["status"]["state"] == "off"
    assert info["cache_protocol"]["requested"] == "salt"
    assert info["slo"] == {"ttft_s": 0.5, "itl_s": 0.05}
    summary = read_json(run, "summary.json")
    for key in ("ttft_s", "ttft_sent_s", "itl_s", "tpot_s", "e2e_s"):
        assert set(summary[key]) >= {"mean", "p50", "p90", "p95", "p99", "p999", "count"}
    assert summary["goodput"]["slo"] == {"ttft_s": 0.5, "itl_s": 0.05}
    assert summary["server"]["available"] is True
    assert summary["prefix"]["expected_hit_rate"] is not None
    assert "run directory:" in done.stdout and "TTFT" in done.stdout


def test_users_for_a_duration(tmp_path: Path) -> None:
    """``--concurrency 2 --duration 2``: two users, and nothing sent after two seconds."""
    run = tmp_path / "run"
    done = bench_cli(
        "--workload", "shared-prefix", "--set", "output_len=8", "--concurrency", "2",
        "--duration", "2", *FAST, "--out", str(run),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    info = read_json(run, "run.json")
    assert info["load"]["duration_s"] == 2.0 and info["status"] == "complete"
    start = info["result"]["schedule_t0_s"]
    requests = requests_table(run)
    assert len(requests) > 20  # ~40 ms each, two at a time
    assert info["plan"]["requests"] > len(requests)  # a generous plan, cut by the clock
    assert requests["intended_s"].max() <= start + 2.0
    assert (requests["status"] == "ok").all()
    assert requests["expected_cached_tokens"].notna().all()  # annotated ahead of the sends
    # two users race for a group's prefix: only there may it differ
    assert assert_cached_as_expected(requests, related="group") >= 1
    dry_run = bench_cli(
        "--workload", "shared-prefix", "--concurrency", "2", "--duration", "2",
        "--dry-run", "--json",
    )  # fmt: skip
    dry = json.loads(dry_run.stdout)
    assert dry["closed_loop_duration_s"] == 2.0 and dry["concurrency"] == 2


def test_the_chat_api_sends_text_of_exact_token_counts(tmp_path: Path) -> None:
    """``--api chat``: prompts become text, rendered with the engine's own /tokenize."""
    run = tmp_path / "run"
    outcome = bench(
        "system-prompt",
        run,
        engine=("fixed_step_s=0.002",),
        api="chat",
        overrides={"num_requests": 8, "rate": 20},
    )
    assert outcome.status == "complete" and outcome.summary.to_json()["requests"]["completed"] == 8
    info = read_json(run, "run.json")
    assert info["target"]["api"] == "chat" and info["workload"]["prompt_format"] == "text"
    requests = requests_table(run)
    assert (requests["output_tokens"] == 128).all()
    # The shared system prompts are still shared, token for token, as text.
    assert outcome.summary.to_json()["prefix"]["observed_hit_rate"] > 0.3
