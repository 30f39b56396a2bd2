"""ShareGPT conversations replayed whole (issue 41 item 4): each conversation a session,
each turn with its recorded history, an opening ``system`` turn kept as the system message,
the prefix oracle knowing every turn before sending, one line when the file is reused."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from bench_support import bench_cli, requests_table
from oracle_races import AS_IT_HAPPENED, assert_cached_as_expected
from workloads_util import train_tokenizer

from perfmodel.config import EngineConfig
from session.bench_oracle import annotated_after_run
from session.bench_plan import dataset_reuse_note
from simengine.embedded import EmbeddedServer
from workloads.build import build_plan
from workloads.errors import InputError
from workloads.oracle import plan_order_expectations
from workloads.sharegpt import conversations
from workloads.spec import load_spec
from workloads.tokenizer import LocalTokenizer

TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def turn(role: str, value: object) -> dict[str, object]:
    return {"from": role, "value": value}


def conversation_file(path: Path, n: int = 6) -> Path:
    """Conversations of 1 to 4 turns, every other one opening with a system turn."""
    items = []
    for i in range(n):
        opening = [turn("system", f"You are assistant number {i}. Be brief.")] if i % 2 else []
        pairs = []
        for k in range(i % 4 + 1):
            pairs += [
                turn("human", f"Conversation {i} turn {k}: explain KV cache block {k}. " * 2),
                turn("gpt", f"Block {k} holds keys and values for a run of tokens. " * (k + 1)),
            ]
        items.append({"id": str(i), "conversations": opening + pairs})
    items.append({"id": "gpt-first", "conversations": [turn("gpt", "hello"), turn("human", "x")]})
    path.write_text(json.dumps(items))
    return path


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> LocalTokenizer:
    folder = tmp_path_factory.mktemp("chat-tok")
    train_tokenizer(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    return LocalTokenizer(folder)


def test_conversations_keep_system_turns_and_stop_at_the_first_break() -> None:
    items = [
        {"conversations": [turn("system", "be kind"), turn("human", "a"), turn("gpt", "b")]},
        {
            "conversations": [
                turn("human", "q1"),
                turn("chatgpt", "a1"),
                turn("user", "q2"),
                turn("assistant", "a2"),
                turn("human", "dangling"),
            ]
        },
        {"conversations": [turn("human", "q"), turn("gpt", 3), turn("human", "after")]},
        {"conversations": [turn("human", "q"), turn("human", "twice"), turn("gpt", "x")]},
        {"conversations": [turn("gpt", "first"), turn("human", "x")]},
        {"conversations": [turn("human", "  "), turn("gpt", "x")]},
        "not a conversation",
    ]
    found = conversations(items)
    assert [(c.system, c.turns) for c in found] == [
        ("be kind", (("a", "b"),)),
        (None, (("q1", "a1"), ("q2", "a2"))),
        (None, (("q", None),)),
    ]  # human-human, gpt-first and blank openings hold no turn
    assert found[1].messages(1) == (
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    )
    assert found[0].messages(0)[0] == {"role": "system", "content": "be kind"}


def test_whole_conversations_are_sessions_whose_turns_carry_the_recorded_history(
    tmp_path: Path, chat_tokenizer: LocalTokenizer
) -> None:
    path = conversation_file(tmp_path / "sg.json")
    plan = build_plan(load_spec(f"sharegpt:{path}", {"prompt_format": "text"}), chat_tokenizer)
    assert len(plan) == sum(i % 4 + 1 for i in range(6))  # every turn of the file, once
    sessions: dict[int, list] = {}
    for r in plan:
        sessions.setdefault(r.session, []).append(r)
    assert sorted(len(turns) for turns in sessions.values()) == sorted(i % 4 + 1 for i in range(6))
    for turns in sessions.values():
        turns.sort(key=lambda r: r.turn)
        assert [r.turn for r in turns] == list(range(len(turns)))
        assert turns[0].intended_s is not None and all(r.intended_s is None for r in turns[1:])
        for before, after in itertools.pairwise(turns):
            ids = list(after.prompt.token_ids(4000))
            assert ids[: before.prompt_len] == list(before.prompt.token_ids(4000))
            assert after.carries_history and not after.composes_history
            recorded = before.messages[-1]["content"]
            assert after.messages[len(before.messages)]["role"] == "assistant"
            assert recorded in after.messages[len(before.messages) - 1]["content"]
        system_first = turns[0].messages[0]["role"] == "system"
        number = int(turns[0].messages[-1]["content"].split()[1])
        assert system_first == bool(number % 2)
        assert all(r.messages[0]["role"] == turns[0].messages[0]["role"] for r in turns)
    # every turn's expectation is known before sending: nothing waits for the run
    assert not annotated_after_run(plan, None)
    expected = plan_order_expectations(plan, 16, None, 4000)
    later = [e for r, e in zip(plan, expected, strict=True) if r.turn]
    assert later and all(e is not None and e > 0 for e in later)


def test_first_turn_form_keeps_the_system_message(
    tmp_path: Path, chat_tokenizer: LocalTokenizer
) -> None:
    path = conversation_file(tmp_path / "sg.json")
    spec = load_spec(f"sharegpt:{path}", {"prompt_format": "text", "turns": "first"})
    plan = build_plan(spec, chat_tokenizer)
    assert len(plan) == 6 and all(r.session is None for r in plan)
    with_system = [r for r in plan if r.messages is not None]
    assert len(with_system) == 3
    assert all(r.messages[0]["role"] == "system" and len(r.messages) == 2 for r in with_system)


def test_a_file_smaller_than_the_requests_is_reused_and_says_so(
    tmp_path: Path, chat_tokenizer: LocalTokenizer
) -> None:
    path = conversation_file(tmp_path / "sg.json")
    spec = load_spec(f"sharegpt:{path}", {"prompt_format": "text", "num_requests": 40})
    plan = build_plan(spec, chat_tokenizer)
    assert len(plan) == 40
    note = dataset_reuse_note(plan)
    assert note is not None and "holds 6 usable conversations" in note and "reused" in note
    # copies of one conversation race each other: the oracle replays the run as it happened
    assert annotated_after_run(plan, None)
    fits = build_plan(load_spec(f"sharegpt:{path}", {"num_requests": 10}), chat_tokenizer)
    assert len(fits) == 10 and dataset_reuse_note(fits) is None


def test_a_tokenizer_without_a_chat_template_names_the_first_turn_form(tmp_path: Path) -> None:
    tokenizer = LocalTokenizer(train_tokenizer(tmp_path))
    path = conversation_file(tmp_path / "sg.json")
    with pytest.raises(InputError) as err:
        build_plan(load_spec(f"sharegpt:{path}", {}), tokenizer)
    assert err.value.field == "--tokenizer" and "turns=first" in (err.value.fix or "")


def test_whole_conversations_against_the_embedded_engine_match_the_oracle(tmp_path: Path) -> None:
    """Later turns hit their history's blocks, exactly as the oracle said before sending;
    a file asked for more turns than it holds is reused, said in one line, and its copies'
    race is replayed after the run in the order it happened."""
    path = conversation_file(tmp_path / "sg.json")
    fast = ("--gpu-telemetry", "off", "--metrics-interval", "0.2", "--dataset", f"sharegpt:{path}")
    with EmbeddedServer(EngineConfig(fixed_step_s=0.001)) as server:
        whole, reused = tmp_path / "whole", tmp_path / "reused"
        done = bench_cli(
            "--endpoint", server.url, *fast, "--rate", "20", "--out", str(whole),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "usable conversations" not in done.stderr
        again = bench_cli(
            "--endpoint", server.url, *fast, "--num-prompts", "24", "--rate", "20",
            "--seed", "1", "--out", str(reused),
        )  # fmt: skip
    requests = requests_table(whole)
    assert len(requests) == sum(i % 4 + 1 for i in range(6))
    later = requests[~requests["id"].str.endswith("-t000")]
    assert len(later) == 7 and (later["cached_tokens"] > 0).all()
    assert_cached_as_expected(requests)  # sent order: the plan's one pass
    assert again.returncode == 0, again.stderr
    line = [line for line in again.stderr.splitlines() if "usable conversations" in line]
    assert len(line) == 1 and "holds 6 usable conversations" in line[0]
    copies = requests_table(reused)
    assert len(copies) == 24
    assert_cached_as_expected(copies, AS_IT_HAPPENED)
