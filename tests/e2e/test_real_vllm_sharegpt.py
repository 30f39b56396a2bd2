"""ShareGPT conversations replayed whole against the real vLLM CPU target (issue 41 item 4):
system-first and 4-turn conversations, every turn sent with its recorded history; the
prefix oracle's expectation, made before sending, is vLLM's cached_tokens request by
request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_support import bench_cli, read_json, requests_table
from oracle_races import assert_cached_as_expected

pytestmark = pytest.mark.real_vllm

WORDS = [
    "cache",
    "block",
    "prefix",
    "token",
    "decode",
    "prefill",
    "scheduler",
    "batch",
    "queue",
    "memory",
]


def text(seed: int, words: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] + str(i % 13) for i in range(words))


def sharegpt_file(path: Path) -> Path:
    items = []
    for i in range(6):
        opening = [{"from": "system", "value": f"System {i}: " + text(i, 60)}] if i % 2 else []
        turns = []
        for k in range(4 if i < 4 else 2):
            turns.append({"from": "human", "value": f"Q{i}.{k} " + text(i * 10 + k, 70)})
            turns.append({"from": "gpt", "value": f"A{i}.{k} " + text(i * 20 + k, 12)})
        items.append({"id": str(i), "conversations": opening + turns})
    path.write_text(json.dumps(items))
    return path


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_whole_sharegpt_conversations_expected_equal_vllms_cached_tokens(
    vllm_url: str, tmp_path: Path, api: str
) -> None:
    path = sharegpt_file(tmp_path / "sg.json")
    out = tmp_path / "run"
    done = bench_cli(
        "--endpoint", vllm_url + "/v1", "--dataset", f"sharegpt:{path}", "--api", api,
        "--rate", "4", "--gpu-telemetry", "off", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert read_json(out, "run.json")["status"] == "complete"
    requests = requests_table(out).sort_values("id")
    assert len(requests) == 20 and (requests["status"] == "ok").all()
    later = requests[~requests["id"].str.endswith("t000")]
    assert len(later) == 14 and (later["cached_tokens"] > 0).all()
    rows = requests[["id", "prompt_tokens", "expected_cached_tokens", "cached_tokens"]]
    print(f"\n{api}: oracle vs vLLM cached_tokens per request\n{rows.to_string(index=False)}")
    assert assert_cached_as_expected(requests) >= 1, rows
