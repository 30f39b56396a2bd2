"""``workloads.trace.read_trace``: lines parsed into rows, blocks keyed by hash id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.errors import InputError
from workloads.trace import read_trace


def _write(tmp_path: Path, *rows: dict) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    return path


def test_rows_come_in_time_order_with_file_order_among_equal_timestamps(tmp_path):
    path = _write(
        tmp_path,
        {"timestamp": 20, "prompt": [1, 2]},
        {"timestamp": 10, "prompt": [3]},
        {"timestamp": 20, "prompt": [4]},
    )
    assert [r.line for r in read_trace(path)] == [2, 1, 3]


def test_without_every_timestamp_the_file_order_is_kept(tmp_path):
    path = _write(tmp_path, {"timestamp": 20, "prompt": [1]}, {"prompt": [2]})
    assert [(r.line, r.timestamp_ms) for r in read_trace(path)] == [(1, 20.0), (2, None)]


def test_mooncake_blocks_are_cut_at_the_block_size_and_equal_ids_are_one_run(tmp_path):
    path = _write(
        tmp_path,
        {"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [7, 8, 9]},
        {"timestamp": 1, "input_length": 8, "output_length": 1, "hash_ids": [7, 8]},
    )
    first, second = read_trace(path, block_size=4)
    assert [s.length for s in first.prompt.segments] == [4, 4, 2]
    assert first.prompt.segments[:2] == second.prompt.segments
    assert first.prompt.segments[0] is second.prompt.segments[0]
    assert (first.output_len, first.mooncake) == (3, True)


def test_a_different_seed_gives_different_tokens_for_the_same_hash_id(tmp_path):
    path = _write(tmp_path, {"input_length": 4, "output_length": 1, "hash_ids": [0]})
    a = read_trace(path, block_size=4, seed=1)[0].prompt.token_ids(1000)
    b = read_trace(path, block_size=4, seed=2)[0].prompt.token_ids(1000)
    assert list(a) != list(b)


@pytest.mark.parametrize(
    ("row", "words"),
    [
        (
            {"input_length": 9, "output_length": 1, "hash_ids": [1, 2]},
            "2 hash_ids for input_length 9",
        ),
        ({"input_length": 0, "output_length": 1, "hash_ids": []}, "input_length must be"),
        ({"prompt": []}, "non-empty list of token ids"),
        ({"prompt": [1, -1]}, "non-empty list of token ids"),
        ({"prompt": [1], "timestamp": "soon"}, "timestamp must be a number"),
        ({"prompt": "hello"}, "needs the target's tokenizer"),
        ({"text": "x"}, "expected Mooncake keys"),
        ({"prompt": [1], "timestamp": -1}, "timestamp must be >= 0"),
        (
            {"input_length": 8, "output_length": 1, "hash_ids": [1, 10**30]},
            f"hash_ids entry {10**30} is outside 0 to 2^63-1",
        ),
        ({"input_length": 4, "output_length": 1, "hash_ids": [-1]}, "hash_ids entry -1"),
    ],
)
def test_a_bad_line_names_the_file_and_its_line_number(tmp_path, row, words):
    path = _write(tmp_path, {"prompt": [1]}, row)
    with pytest.raises(InputError) as err:
        read_trace(path, block_size=4)
    assert err.value.field == "workload"
    assert f"{path} line 2: " in err.value.problem and words in err.value.problem


def test_an_empty_or_missing_file_is_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(InputError, match="has no requests"):
        read_trace(tmp_path / "empty.jsonl")
    with pytest.raises(InputError, match="not found"):
        read_trace(tmp_path / "absent.jsonl")
