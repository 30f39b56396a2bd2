"""``workloads.fit``: which requests cannot fit a server's ``max_model_len``."""

from __future__ import annotations

import pytest

from workloads.errors import InputError
from workloads.fit import overlong, refuse_overlong, sequence_length
from workloads.plan import Plan, Prompt, RequestSpec, Segment


def _request(rid: str, prompt: int, out: int, session: int | None = None, turn: int | None = None):
    return RequestSpec(
        rid, Prompt((Segment(prompt, key=hash(rid) & 0xFFFF),)), out, session=session, turn=turn
    )


def _plan(*requests: RequestSpec) -> Plan:
    return Plan("test", 0, tuple(requests))


def test_sequence_length_is_prompt_plus_max_tokens():
    assert sequence_length(_request("a", 100, 28), 100) == 128


def test_a_request_exactly_at_the_limit_fits_and_one_token_more_does_not():
    plan = _plan(_request("fits", 100, 28), _request("over", 101, 28))
    assert [(r.id, n) for r, n in overlong(plan, 128)] == [("over", 129)]


def test_a_later_turn_counts_the_history_with_every_earlier_answer_at_full_length():
    # turn 0: 50 prompt + 20 out = 70; turn 1 carries 50 + 20 (answer) + 10 + 20 out = 100
    plan = _plan(_request("s0t0", 50, 20, session=0, turn=0), _request("s0t1", 10, 20, 0, 1))
    assert overlong(plan, 100) == []
    assert [(r.id, n) for r, n in overlong(plan, 99)] == [("s0t1", 100)]


def test_refusal_names_the_flag_counts_and_says_where_the_limit_came_from():
    plan = _plan(_request("a", 10, 1), _request("b", 300, 10), _request("c", 200, 10))
    with pytest.raises(InputError) as err:
        refuse_overlong(plan, 128, "GET /v1/models")
    assert err.value.field == "--allow-overlong"
    assert "2 of 3 requests" in err.value.problem
    assert "longest 310" in err.value.problem
    assert "max_model_len of 128" in err.value.problem
    assert "GET /v1/models" in err.value.problem


def test_nothing_is_refused_when_everything_fits():
    refuse_overlong(_plan(_request("a", 10, 1)), 11, "flag")
