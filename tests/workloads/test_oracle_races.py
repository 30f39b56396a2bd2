"""The one rule the wall-clock oracle tests hold a server to (``support/oracle_races.py``):
exact outside a race, and in a race only the direction that race can move a request."""

from __future__ import annotations

import pandas as pd
import pytest
from oracle_races import AS_IT_HAPPENED, SENT_ORDER, assert_cached_as_expected, off_the_oracle

BLOCK = 16


def _table(rows: list[tuple[float, float, int, int]]) -> pd.DataFrame:
    """(sent_s, first_token_s, cached, expected) per request, ids r0, r1, …"""
    sent, first, cached, expected = zip(*rows, strict=True)
    return pd.DataFrame(
        {
            "id": [f"r{i}" for i in range(len(rows))],
            "sent_s": sent,
            "first_token_s": first,
            "cached_tokens": cached,
            "expected_cached_tokens": expected,
        }
    )


#: One at a time: each request's first token before the next one's send.
CALM = [(0.0, 0.05, 0, 0), (0.1, 0.15, 64, 64), (0.2, 0.25, 64, 64), (0.3, 0.35, 128, 128)]
#: r1 sent at 0.02, while r0 (sent at 0.0) waited for its first token until 0.05.
RACE = [(0.0, 0.05, 0, 0), (0.02, 0.06, 0, 64), (0.2, 0.25, 64, 64)]


@pytest.mark.parametrize("replay", [SENT_ORDER, AS_IT_HAPPENED])
def test_an_oracle_off_by_a_block_outside_a_race_fails(replay: str) -> None:
    assert assert_cached_as_expected(_table(CALM), replay) == 3
    for shift in (BLOCK, -BLOCK):
        rows = [(s, f, c, e + shift if e else e) for s, f, c, e in CALM]
        with pytest.raises(AssertionError, match="no race explains"):
            assert_cached_as_expected(_table(rows), replay)
    # the calm request after a race is held exactly too
    wrong = [RACE[0], (0.02, 0.06, 0, 0), (0.2, 0.25, 64, 64 + BLOCK)]
    assert list(off_the_oracle(_table(wrong), replay)["id"]) == ["r2"]


def test_in_send_order_a_race_only_lowers_the_later_request_and_raises_the_earlier() -> None:
    assert assert_cached_as_expected(_table(RACE), SENT_ORDER) == 1  # r2 alone held exactly
    more = [RACE[0], (0.02, 0.06, 64 + BLOCK, 64), RACE[2]]
    assert list(off_the_oracle(_table(more), SENT_ORDER)["id"]) == ["r1"]
    # r0 overtaken by r1 (sent during r0's prefill): r0 may find r1's blocks, not lose any
    overtaken = [(0.0, 0.05, 32, 0), (0.02, 0.06, 0, 64), RACE[2]]
    assert off_the_oracle(_table(overtaken), SENT_ORDER).empty
    lost = [(0.0, 0.05, 32, 48), (0.02, 0.06, 64, 64), RACE[2]]
    assert list(off_the_oracle(_table(lost), SENT_ORDER)["id"]) == ["r0"]


def test_as_it_happened_a_race_only_adds_what_the_engine_filled_before_the_first_token():
    """That pass already leaves r0's prompt out of r1's expectation (r0 had no first token
    at r1's send): the engine may have filled some of its blocks by then, never fewer."""
    early = [RACE[0], (0.02, 0.06, BLOCK, 0), RACE[2]]
    assert off_the_oracle(_table(early), AS_IT_HAPPENED).empty
    assert list(off_the_oracle(_table(RACE), AS_IT_HAPPENED)["id"]) == ["r1"]


def test_requests_of_unrelated_groups_do_not_race() -> None:
    """r1 (group 1) sent during r0's prefill (group 0): different prefixes, no race, so
    its shortfall is the oracle's error; r2 (group 0) raced r0 and may find less."""
    table = _table([RACE[0], (0.02, 0.06, 0, 64), (0.03, 0.07, 0, 64)])
    table["group"] = [0, 1, 0]
    assert list(off_the_oracle(table, related="group")["id"]) == ["r1"]
    assert off_the_oracle(table).empty  # every request related: both raced r0


def test_a_missing_figure_is_off_the_oracle() -> None:
    table = _table(CALM)
    table.loc[2, "cached_tokens"] = None
    assert list(off_the_oracle(table)["id"]) == ["r2"]
    with pytest.raises(ValueError, match="replay must be"):
        off_the_oracle(table, "plan order")
