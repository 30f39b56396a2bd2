"""Trace replay: the real Mooncake traces, prompt JSONL, and every way a trace can be bad."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from workloads_util import train_tokenizer

from workloads.build import build_plan
from workloads.errors import InputError
from workloads.plan import Plan
from workloads.spec import load_spec
from workloads.stats import plan_stats
from workloads.tokenizer import LocalTokenizer

VOCAB = 32000


def _trace(path: Path, **overrides: object) -> Plan:
    return build_plan(load_spec(f"trace:{path}", overrides))


@pytest.fixture(scope="module")
def synthetic(fixtures_dir: Path) -> Path:
    return fixtures_dir / "traces" / "mooncake_synthetic_trace.jsonl"


@pytest.fixture(scope="module")
def conversation(fixtures_dir: Path) -> Path:
    return fixtures_dir / "traces" / "mooncake_conversation_trace.jsonl"


@pytest.mark.parametrize(
    ("name", "requests", "blocks", "tokens", "span_s"),
    [
        ("synthetic", 3993, 0.640, 0.651, 1022.0),
        pytest.param("conversation", 12031, 0.366, 0.374, 3537.0, marks=pytest.mark.slow),
    ],
)
def test_mooncake_infinite_cache_hit_rates(
    fixtures_dir: Path, name: str, requests: int, blocks: float, tokens: float, span_s: float
) -> None:
    plan = _trace(fixtures_dir / "traces" / f"mooncake_{name}_trace.jsonl")
    stats = plan_stats(plan)
    assert stats["requests"] == requests
    assert stats["arrival"] == "trace"
    assert stats["schedule_s"] == pytest.approx(span_s, abs=1.0)
    prefix = stats["prefix"]
    assert prefix["block_size"] == 512 and prefix["pool"] == "unbounded"
    assert round(prefix["block_hit_rate"], 3) == blocks
    assert round(prefix["token_hit_rate"], 3) == tokens
    # Engine rules (full blocks only, last token recomputed) can only lower the figure.
    assert prefix["expected_block_hit_rate"] <= prefix["block_hit_rate"]
    assert prefix["expected_hit_rate"] == pytest.approx(prefix["token_hit_rate"], abs=0.002)


def test_equal_hash_ids_are_identical_blocks(synthetic: Path) -> None:
    plan = _trace(synthetic, num_requests=50)
    rows = [json.loads(line) for line in synthetic.read_text().splitlines()[:50]]
    blocks: dict[int, bytes] = {}
    for row, r in zip(rows, plan, strict=True):
        tokens = r.prompt.token_ids(VOCAB)
        assert len(tokens) == row["input_length"] and r.max_tokens == row["output_length"]
        for i, h in enumerate(row["hash_ids"]):
            block = tokens[i * 512 : (i + 1) * 512].tobytes()
            if len(block) == 512 * 8:
                assert blocks.setdefault(h, block) == block
    assert len(blocks) < sum(len(r["hash_ids"]) for r in rows)  # some ids did repeat


def test_time_scale_and_truncation(synthetic: Path) -> None:
    full = _trace(synthetic, num_requests=100)
    fast = _trace(synthetic, num_requests=100, time_scale=0.5)
    assert [r.intended_s / 2 for r in full] == pytest.approx([r.intended_s for r in fast])
    assert full.requests[-1].intended_s == pytest.approx(
        json.loads(synthetic.read_text().splitlines()[99])["timestamp"] / 1000
    )
    window = _trace(synthetic, duration=60)
    assert max(r.intended_s for r in window) < 60
    assert len(window) == pytest.approx(60 * 3.9, rel=0.25)


def test_trace_prompts_can_be_sent_on_another_schedule(synthetic: Path) -> None:
    closed = _trace(synthetic, num_requests=30, concurrency=4)
    assert closed.arrival == "closed" and all(r.intended_s is None for r in closed)
    poisson = _trace(synthetic, num_requests=30, rate=50)
    assert poisson.arrival == "poisson"
    assert [r.prompt for r in poisson] == [r.prompt for r in closed]


def test_stats_at_another_block_size_and_a_finite_pool(synthetic: Path) -> None:
    plan = _trace(synthetic, num_requests=300)
    unbounded = plan_stats(plan)["prefix"]
    small = plan_stats(plan, block_size=512, num_blocks=200)["prefix"]
    assert small["expected_hit_rate"] < 0.7 * unbounded["expected_hit_rate"]
    fine = plan_stats(plan, block_size=128)["prefix"]
    assert fine["block_size"] == 128
    assert fine["expected_hit_rate"] >= unbounded["expected_hit_rate"]


def test_prompt_jsonl_with_token_ids_and_text(tmp_path: Path) -> None:
    tokenizer = LocalTokenizer(train_tokenizer(tmp_path))
    path = tmp_path / "prompts.jsonl"
    lines = [
        {"prompt": [7, 8, 9], "output_length": 5, "timestamp": 0},
        {"prompt": "def open(path):\n    return path", "timestamp": 250},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + "\n")
    plan = build_plan(load_spec(f"trace:{path}", {"output_len": 33}), tokenizer)
    ids, text = plan.requests
    assert ids.prompt.token_ids(VOCAB).tolist() == [7, 8, 9] and ids.max_tokens == 5
    assert text.text == lines[1]["prompt"] and text.max_tokens == 33
    assert text.prompt.token_ids(VOCAB).tolist() == tokenizer.encode(lines[1]["prompt"])
    assert [r.intended_s for r in plan] == [0.0, 0.25]
    assert plan.spec["trace_block_size"] is None


def test_bad_json_line_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = json.dumps({"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]})
    path.write_text(f"{good}\n\n{{'timestamp': 5}}\n")
    with pytest.raises(InputError) as info:
        _trace(path)
    message = str(info.value)
    assert str(path) in message and "line 3" in message and "not JSON" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (
            '{"timestamp": 0, "input_length": 1000, "output_length": 2, "hash_ids": [1]}',
            "1 hash_ids for input_length 1000, expected 2",
        ),
        (
            '{"timestamp": 0, "input_length": 0, "output_length": 2, "hash_ids": []}',
            "input_length must be",
        ),
        (
            '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": ["a"]}',
            "list of integers",
        ),
        ('{"timestamp": "soon", "prompt": [1, 2]}', "timestamp must be"),
        ('{"prompt": []}', "non-empty list of token ids"),
        ('{"prompt": "hello"}', "needs the target's tokenizer"),
        ('{"input": "hello"}', "expected Mooncake keys"),
        ("[1, 2, 3]", "expected a JSON object"),
    ],
)
def test_malformed_lines_are_input_errors_with_their_line(
    tmp_path: Path, line: str, needle: str
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(InputError) as info:
        _trace(path, rate=1)
    assert "line 1" in str(info.value) and needle in str(info.value)


def test_missing_trace_and_missing_timestamps(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        _trace(tmp_path / "nope.jsonl")
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt": [1, 2, 3]}\n')
    with pytest.raises(InputError) as info:
        _trace(path)
    assert info.value.field == "arrival"
    assert len(_trace(path, rate=2)) == 1


def test_trace_block_size_must_match_the_ids(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 300, "output_length": 2, "hash_ids": [4, 5, 6]},
        {"timestamp": 9, "input_length": 260, "output_length": 2, "hash_ids": [4, 5, 7]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match="block size"):
        _trace(path)
    plan = _trace(path, block_size=128)
    first, second = (r.prompt.token_ids(VOCAB) for r in plan)
    assert len(first) == 300 and len(second) == 260
    assert np.array_equal(first[:256], second[:256])
    assert not np.array_equal(first[256:260], second[256:260])
    prefix = plan_stats(plan)["prefix"]
    assert prefix["block_size"] == 128
    assert prefix["block_hit_rate"] == pytest.approx(2 / 6)
    assert prefix["expected_cached_tokens"] == 256
