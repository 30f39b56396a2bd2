"""``loadgen.sessions`` (later turns composed from real answers) and ``loadgen.plan_check``
(the plan split into phases; what a target cannot take refused before sending)."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.adapters import adapter_for
from loadgen.load_options import LoadOptions
from loadgen.plan_check import check_load, split_plan
from loadgen.sessions import SessionBook
from loadgen.target import Target
from workloads.errors import InputError
from workloads.plan import Plan, Prompt, RequestSpec

VLLM = Target("http://127.0.0.1:9", "vllm", "completions", "m", vocab_size=1000)


def _req(rid: str, tokens=(1, 2), **fields) -> RequestSpec:
    return RequestSpec(rid, Prompt.of_tokens(list(tokens)), 4, **fields)


def _session_plan() -> Plan:
    return Plan("multi-turn", 0, (
        _req("s0t0", (1, 2), session=0, turn=0, intended_s=0.0),
        _req("s0t1", (3,), session=0, turn=1),
        _req("s0t2", (4,), session=0, turn=2),
    ))  # fmt: skip


def test_a_later_turn_sends_the_history_the_answer_and_its_own_tokens():
    plan = _session_plan()
    book = SessionBook(plan)
    first, second, third = plan.requests
    assert book.full_prompt(first) == first.prompt and book.has_next(first)
    book.ended(first, [90, 91], None)
    composed = book.full_prompt(second)
    assert list(composed.token_ids(1000)) == [1, 2, 90, 91, 3]
    assert book.composed == {"s0t1": composed}
    book.ended(second, [92], None)
    assert list(book.full_prompt(third).token_ids(1000)) == [1, 2, 90, 91, 3, 92, 4]
    assert not book.has_next(third)


def test_a_text_history_is_composed_from_the_returned_text_and_tokenized_the_servers_way():
    plan = Plan("chat", 0, (
        _req("t0", session=1, turn=0, text="Hi."),
        _req("t1", session=1, turn=1, text=" More?"),
    ))  # fmt: skip
    book = SessionBook(plan, text_tokens=lambda text: list(range(len(text))))
    book.full_prompt(plan.requests[0])
    book.ended(plan.requests[0], None, " Hello!")
    assert book.full_prompt(plan.requests[1]) == "Hi. Hello! More?"
    assert asyncio.run(book.settle(plan.requests[1])) == len("Hi. Hello! More?")
    assert len(book.composed["t1"]) == 16
    assert asyncio.run(SessionBook(plan).settle(plan.requests[1])) is None


def test_the_plan_splits_into_warmups_open_loop_by_time_and_closed_loop():
    plan = Plan("x", 0, (
        _req("w", warmup=True),
        _req("late", intended_s=2.0),
        _req("early", intended_s=1.0),
        _req("closed"),
        _req("turn1", session=0, turn=1),
    ))  # fmt: skip
    warm, open_loop, closed = split_plan(plan)
    assert [[r.id for r in part] for part in (warm, open_loop, closed)] == [
        ["w"], ["early", "late"], ["closed"],
    ]  # fmt: skip


def _refused(plan: Plan, options: LoadOptions, target: Target = VLLM, users=None) -> InputError:
    _, _, closed = split_plan(plan)
    with pytest.raises(InputError) as err:
        check_load(plan, closed, options, target, adapter_for(target), users)
    return err.value


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        (LoadOptions(max_concurrency=0), "--max-concurrency"),
        (LoadOptions(concurrency=-1), "--concurrency"),
        (LoadOptions(request_timeout_s=0), "--timeout"),
    ],
)
def test_non_positive_load_options_are_refused_naming_the_flag(options, flag):
    assert _refused(Plan("x", 0, (_req("a", intended_s=0.0),)), options).field == flag


def test_closed_loop_requests_need_users_and_token_prompts_need_a_vocabulary():
    closed = Plan("x", 0, (_req("a"),))
    assert "no concurrency serves them" in _refused(closed, LoadOptions()).problem
    check_load(closed, list(closed), LoadOptions(), VLLM, adapter_for(VLLM), 2)
    blind = Target("http://127.0.0.1:9", "vllm", "completions", "m")
    assert _refused(closed, LoadOptions(), blind, users=1).field == "vocab_size"


def test_a_request_the_api_cannot_send_is_refused_naming_it():
    llama = Target("http://127.0.0.1:9", "llamacpp", "llamacpp", "m", vocab_size=1000)
    plan = Plan("x", 0, (_req("a", intended_s=0.0), _req("b", intended_s=1.0, lora="lo")))
    err = _refused(plan, LoadOptions(), llama)
    assert err.field == "--backend" and err.problem.startswith("request b: ")
