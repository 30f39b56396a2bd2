"""``workloads.datasets``: reading ShareGPT and JSONL files, vLLM's random dataset."""

from __future__ import annotations

import json

import pytest

from workloads.datasets import build_random, jsonl_entries, sharegpt_entries
from workloads.errors import InputError
from workloads.spec import load_spec


def test_sharegpt_keeps_conversations_opened_by_a_human_with_their_first_answer(tmp_path):
    path = tmp_path / "sg.json"
    conversations = [
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
        {"conversations": [{"from": "gpt", "value": "first"}, {"from": "human", "value": "x"}]},
        {"conversations": [{"from": "human", "value": "alone"}]},
        {"conversations": [{"from": "human", "value": "   "}, {"from": "gpt", "value": "a"}]},
        {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": 3}]},
        "not a conversation",
    ]
    path.write_text(json.dumps(conversations))
    entries = sharegpt_entries(path)
    assert [(e.text, e.answer) for e in entries] == [("hi", "yo"), ("q", None)]


def test_sharegpt_that_is_not_a_list_is_refused_naming_the_flag(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text('{"conversations": []}')
    with pytest.raises(InputError) as err:
        sharegpt_entries(path)
    assert err.value.field == "--dataset" and "a list of conversations" in err.value.problem
    with pytest.raises(InputError, match="not found"):
        sharegpt_entries(tmp_path / "absent.json")


def test_jsonl_reads_prompts_messages_and_answer_lengths(tmp_path):
    path = tmp_path / "d.jsonl"
    chat = [{"role": "user", "content": "hello"}]
    lines = [
        {"prompt": "a", "max_tokens": 5},
        {"prompt": "b", "output_len": 7},
        {"prompt": "c", "max_tokens": 0},
        {"messages": chat},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    entries = jsonl_entries(path)
    assert [(e.text, e.max_tokens) for e in entries[:3]] == [("a", 5), ("b", 7), ("c", None)]
    assert entries[3].messages == tuple(chat) and entries[3].text is None


def test_a_jsonl_line_without_a_prompt_names_its_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a"}\n{"messages": [{"content": "no role"}]}\n')
    with pytest.raises(InputError) as err:
        jsonl_entries(path)
    assert err.value.field == "--dataset" and f"{path} line 2: no prompt" in err.value.problem


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", 10**30),
        ("max_tokens", -3),
        ("output_len", 2.5),
        ("max_tokens", "12"),
        ("output_len", 10**8 + 1),
        ("max_tokens", True),
    ],
)
def test_an_absurd_answer_length_is_refused_naming_its_line_and_field(tmp_path, field, value):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "a"}) + "\n" + json.dumps({"prompt": "b", field: value}))
    with pytest.raises(InputError) as err:
        jsonl_entries(path)
    assert err.value.field == "--dataset"
    assert err.value.problem.startswith(
        f"{path} line 2: {field} must be a whole number of tokens from 1 to 100,000,000, got "
    )


def test_random_range_ratio_spreads_lengths_around_the_input_len():
    spec = load_spec("random", {"input_len": 100, "range_ratio": 0.1, "num_requests": 200})
    lengths = [r.prompt_len for r in build_random(spec)]
    assert min(lengths) >= 90 and max(lengths) <= 110 and len(set(lengths)) > 5


def test_random_range_ratio_of_one_or_more_is_refused():
    with pytest.raises(InputError) as err:
        build_random(load_spec("random", {"range_ratio": 1}))
    assert err.value.field == "range_ratio"


def test_random_prefix_len_puts_one_shared_segment_in_front_of_every_prompt():
    spec = load_spec("random", {"input_len": 20, "prefix_len": 8, "num_requests": 3})
    plan = build_random(spec)
    firsts = {r.prompt.segments[0] for r in plan}
    assert len(firsts) == 1 and next(iter(firsts)).length == 8
    assert {r.prompt_len for r in plan} == {28} and {r.group for r in plan} == {0}
