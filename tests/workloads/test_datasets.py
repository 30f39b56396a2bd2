"""Datasets as vLLM users bring them (random, sharegpt:FILE, jsonl:FILE) and the flags
they type (--num-prompts, --request-rate inf, --random-*, --goodput, --dataset-name)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bench_support import bench_cli, read_json, requests_table
from oracle_races import assert_cached_as_expected
from workloads_util import train_tokenizer

from perfmodel.config import EngineConfig
from simengine.embedded import EmbeddedServer
from workloads.build import build_plan
from workloads.errors import InputError
from workloads.spec import load_spec
from workloads.tokenizer import LocalTokenizer

FAST = ("--gpu-telemetry", "off", "--metrics-interval", "0.2")


def sharegpt(path: Path, n: int = 12) -> Path:
    conversations = [
        {
            "id": str(i),
            "conversations": [
                {
                    "from": "human",
                    "value": f"Question {i}: what is a prefix cache block? " * (i % 3 + 1),
                },
                {"from": "gpt", "value": "A run of tokens whose KV is kept. " * (i % 4 + 1)},
            ],
        }
        for i in range(n)
    ]
    conversations.append({"id": "x", "conversations": [{"from": "gpt", "value": "no human"}]})
    conversations.append({"id": "y", "conversations": [{"from": "human", "value": "no answer"}]})
    path.write_text(json.dumps(conversations))
    return path


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> LocalTokenizer:
    return LocalTokenizer(train_tokenizer(tmp_path_factory.mktemp("tok")))


def test_sharegpt_first_prompts_with_their_answer_lengths(
    tmp_path: Path, tokenizer: LocalTokenizer
) -> None:
    path = sharegpt(tmp_path / "sg.json")
    first = {"prompt_format": "text", "turns": "first"}
    plan = build_plan(load_spec(f"sharegpt:{path}", first), tokenizer)
    assert len(plan) == 12  # the whole file; the two conversations without a pair skipped
    for r in plan:
        assert r.text is not None and r.text.startswith("Question")
        assert list(r.prompt.token_ids(2000)) == tokenizer.encode(r.text, special=True)
        answer = "A run of tokens whose KV is kept. " * (int(r.text.split()[1][:-1]) % 4 + 1)
        assert r.max_tokens == len(tokenizer.encode(answer, special=False))
    bigger = build_plan(load_spec(f"sharegpt:{path}", {**first, "num_requests": 30}), tokenizer)
    assert len(bigger) == 30 and len({r.text for r in bigger}) == 12  # cycled


def test_jsonl_prompts_and_chat_conversations(tmp_path: Path, tokenizer: LocalTokenizer) -> None:
    path = tmp_path / "p.jsonl"
    lines = [{"prompt": "tell me about caches", "max_tokens": 9}, {"prompt": "and blocks"}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    plan = build_plan(load_spec(f"jsonl:{path}", {"prompt_format": "text"}), tokenizer)
    assert 9 in {r.max_tokens for r in plan}
    assert {r.text for r in plan} == {"tell me about caches", "and blocks"}


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "not JSON"), ('{"text": "x"}', "no prompt"), ("[1]", "not a JSON object")],
)
def test_a_bad_jsonl_line_is_one_line_naming_it(
    tmp_path: Path, tokenizer: LocalTokenizer, content: str, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n' + content + "\n")
    with pytest.raises(InputError) as info:
        build_plan(load_spec(f"jsonl:{path}", {"prompt_format": "text"}), tokenizer)
    assert "line 2" in str(info.value) and message in str(info.value)
    assert info.value.field == "--dataset" and "\n" not in str(info.value)


def test_random_lengths_vary_within_the_range_ratio() -> None:
    spec = load_spec(
        "random", {"input_len": 1000, "output_len": 100, "range_ratio": 0.25, "num_requests": 200}
    )
    plan = build_plan(spec)
    prompts = [r.prompt_len for r in plan]
    outputs = [r.max_tokens for r in plan]
    assert 750 <= min(prompts) < 850 and 1150 < max(prompts) <= 1250
    assert min(outputs) >= 75 and max(outputs) <= 125
    assert len({tuple(r.prompt.token_ids(32000)[:8]) for r in plan}) == 200  # all distinct


def test_vllm_flags_against_the_engine(tmp_path: Path) -> None:
    """vLLM's spelling end to end: --random-*, --num-prompts, --request-rate inf (every
    request due at t=0) and --goodput in milliseconds."""
    out = tmp_path / "run"
    done = bench_cli(
        "--random-input-len", "200", "--random-output-len", "8", "--num-prompts", "12",
        "--request-rate", "inf", "--goodput", "ttft:60000", "--goodput", "tpot:60000",
        "--percentile-metrics", "ttft,e2el,itl", "--metric-percentiles", "50,99.9",
        "--engine", "fixed_step_s=0.002", *FAST, "--out", str(out), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["requests"]["completed"] == 12
    assert summary["goodput"]["slo"] == {"ttft_s": 60.0, "tpot_s": 60.0}
    assert summary["goodput"]["share"] == 1.0
    requests = requests_table(out)
    assert requests["intended_s"].nunique() == 1  # all due at the schedule's start
    picked = summary["percentiles"]  # vLLM's meaning: TTFT and E2E from the actual send
    assert set(picked) == {"ttft_sent_s", "e2e_sent_s", "itl_s"}
    assert set(picked["ttft_sent_s"]) == {"p50", "p99.9"}
    ttft = requests["first_token_s"] - requests["sent_s"]
    assert picked["ttft_sent_s"]["p50"] == pytest.approx(float(np.percentile(ttft, 50)))
    assert picked["e2e_sent_s"]["p99.9"] == pytest.approx(
        float(np.percentile(requests["end_s"] - requests["sent_s"], 99.9))
    )
    assert read_json(out, "run.json")["workload"]["workload"] == "random"


def test_sharegpt_through_the_server_tokenizer_keeps_the_oracle_exact(tmp_path: Path) -> None:
    """Prompts repeat once the file is used up: the repeats hit, as the oracle says."""
    path = sharegpt(tmp_path / "sg.json")
    with EmbeddedServer(EngineConfig(fixed_step_s=0.001)) as server:
        out = tmp_path / "run"
        done = bench_cli(
            "--endpoint", server.url, "--dataset-name", "sharegpt", "--dataset-path", str(path),
            "--num-prompts", "20", "--concurrency", "1", *FAST, "--out", str(out),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    requests = requests_table(out)
    assert len(requests) == 20 and (requests["cached_tokens"] > 0).sum() >= 8
    # one at a time: no request races another, so every one is held exactly
    assert assert_cached_as_expected(requests) == (requests["expected_cached_tokens"] > 0).sum()


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--dataset", "sharegpt"), "--dataset"),
        (("--dataset", "csv:x"), "--dataset"),
        (("--workload", "doc-qa", "--random-input-len", "5"), "--random-input-len"),
        (("--dataset-path", "x.json"), "--dataset-name"),
        (("--slo", "ttft=5", "--goodput", "ttft:5"), "--goodput"),
        ((), "--workload"),
        (("--workload", "doc-qa", "--dataset", "random"), "--dataset"),
    ],
)
def test_dataset_flag_mistakes_are_one_line(args: tuple[str, ...], flag: str) -> None:
    done = bench_cli(*args, "--dry-run")
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and flag in line, line
