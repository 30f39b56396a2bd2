"""The prefix oracle's expected cached tokens against a server's, request by request, on
the wall clock: equal, except where two requests raced, and then only in the direction
the race can move them.

The oracle replays the requests in the order they were sent. On the wall clock a request
R *races* an earlier-sent request Q when R was sent before Q's first token came back
(``Q.first_token_s > R.sent_s``): Q's prefill was not over, so R may have reached the
engine in the same scheduler step as Q, or have been admitted before Q's blocks were
filled, or (over separate connections or processes) even before Q. Each pass of the oracle
(``session.bench_oracle``) assumes something else about that moment:

* ``SENT_ORDER`` (the pass before sending, and the one after the run in plan order):
  every earlier request's prompt is cached by the time the next one is sent. A request
  that raced an earlier one may find less than that (the earlier one's blocks not there
  yet); one that a later-sent request raced may find more (the later one got in first).
* ``AS_IT_HAPPENED`` (sessions replayed after the run): a prompt joins the cache only at
  its first token as the client saw it. The engine fills blocks before that, so a request
  sent while another was in its prefill, either way round, may find more, never less.

Where the workload says which requests can share blocks at all (a shared-prefix
workload's ``group``: ``related``), only those race each other. Every request in no race
must equal the oracle exactly: an oracle off by one block on
any of them fails (``tests/workloads/test_oracle_races.py`` plants such errors).
"""

from __future__ import annotations

import pandas as pd

#: The oracle's pass replays the run in send order, each prompt cached when sent.
SENT_ORDER = "sent order"
#: The oracle's pass replays the run's events: a prompt is cached at its first token.
AS_IT_HAPPENED = "as it happened"

COLUMNS = ["id", "sent_s", "first_token_s", "cached_tokens", "expected_cached_tokens"]


def races(requests: pd.DataFrame, related: str | None = None) -> pd.DataFrame:
    """Per request (indexed like ``requests``): ``raced_earlier``, whether it was sent
    while an earlier-sent request still waited for its first token, and ``raced_later``,
    whether a later-sent request was sent while it still waited for its own. With
    ``related`` (a column, e.g. a shared-prefix workload's ``group``), only requests with
    the same value in it can race: others share no block."""
    sent = requests["sent_s"].to_numpy(dtype=float)
    first = requests["first_token_s"].to_numpy(dtype=float)
    # pair (q, r): q sent before r, and r sent before q's first token
    before = sent[:, None] < sent[None, :]
    overlaps = before & (first[:, None] > sent[None, :])
    if related is not None:
        key = requests[related].to_numpy()
        overlaps &= key[:, None] == key[None, :]
    return pd.DataFrame(
        {"raced_earlier": overlaps.any(axis=0), "raced_later": overlaps.any(axis=1)},
        index=requests.index,
    )


def off_the_oracle(
    requests: pd.DataFrame, replay: str = SENT_ORDER, related: str | None = None
) -> pd.DataFrame:
    """The requests whose cached tokens differ from the oracle's in a way no race explains."""
    if replay not in (SENT_ORDER, AS_IT_HAPPENED):
        raise ValueError(f"replay must be {SENT_ORDER!r} or {AS_IT_HAPPENED!r}, not {replay!r}")
    raced = races(requests, related)
    cached = requests["cached_tokens"]
    expected = requests["expected_cached_tokens"]
    in_race = raced["raced_earlier"] | raced["raced_later"]
    if replay == SENT_ORDER:
        explained = ((cached < expected) & raced["raced_earlier"]) | (
            (cached > expected) & raced["raced_later"]
        )
    else:
        explained = (cached > expected) & in_race
    wrong = cached.isna() | expected.isna() | ((cached != expected) & ~explained)
    return requests.loc[wrong, [c for c in COLUMNS if c in requests]].join(raced)


def assert_cached_as_expected(
    requests: pd.DataFrame, replay: str = SENT_ORDER, related: str | None = None
) -> int:
    """Fail, naming the requests, unless every request's ``cached_tokens`` equals its
    ``expected_cached_tokens`` or differs only as a race explains (module docstring).
    Returns how many requests with a positive expectation were held to exact equality,
    for a test to say its run was not all races."""
    wrong = off_the_oracle(requests, replay, related)
    assert wrong.empty, f"cached tokens off the oracle ({replay}) as no race explains:\n{wrong}"
    raced = races(requests, related)
    calm = ~(raced["raced_earlier"] | raced["raced_later"])
    return int((calm & (requests["expected_cached_tokens"] > 0)).sum())
