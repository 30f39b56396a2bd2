"""While a plan is sent, the requests built from it (``RequestSpec`` objects read from
its columns) are only those in flight: their number is bounded by the users, not by
the plan's length. Counted, not timed: every request the plan's store builds is noted
(weakly) and the live ones counted at each send."""

from __future__ import annotations

import asyncio
import weakref
from pathlib import Path

import pytest
from loadgen_servers import Server, generator

from loadgen.load_options import LoadObserver, LoadOptions
from loadgen.plan_check import split_plan
from loadgen.records import RequestRecord
from loadgen.run import run_load
from loadgen.sessions import SessionBook
from loadgen.target import Target
from runfmt.rundir import RunDir
from runfmt.tables import RunTables
from runtime.clock import RunClock
from workloads import packed
from workloads.plan import Plan, Prompt, RequestSpec, Segment

USERS = 4


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> weakref.WeakSet[RequestSpec]:
    """Every request the plans' stores build from now on, while it lives."""
    live: weakref.WeakSet[RequestSpec] = weakref.WeakSet()
    spec = packed._Store.spec

    def noted(self: packed._Store, i: int) -> RequestSpec:
        made = spec(self, i)
        live.add(made)
        return made

    monkeypatch.setattr(packed._Store, "spec", noted)
    return live


def _plan(n: int, gap_s: float | None = None, sessions: bool = False) -> Plan:
    def requests():
        for i in range(n):
            yield RequestSpec(
                f"r{i:04d}",
                Prompt((Segment(16, key=7), Segment(8, key=1000 + i))),
                4,
                intended_s=None if gap_s is None else i * gap_s,
                session=i // 2 if sessions else None,
                turn=i % 2 if sessions else None,
                think_time_s=0.001 if sessions else 0.0,
            )

    return Plan("test", 0, requests(), concurrency=None if gap_s is not None else USERS)


class _Count(LoadObserver):
    def __init__(self, live: weakref.WeakSet[RequestSpec]) -> None:
        self.live = live
        self.most = 0
        self.sends = 0

    def on_send(self, record: RequestRecord) -> None:
        self.sends += 1
        self.most = max(self.most, len(self.live))


def _send(plan: Plan, tmp_path: Path, observer: LoadObserver) -> list[str]:
    async def go() -> list[str]:
        async with Server(generator(0.0, 0.0)) as url:
            target = Target(url, "vllm", "completions", "tiny-llama", vocab_size=8192)
            run_dir = RunDir(tmp_path / "run", create=True)
            options = LoadOptions(concurrency=None)
            result = await run_load(plan, target, run_dir, RunClock(), options, observer)
            run_dir.close()
            assert result.status == "complete"
            return list(RunTables(run_dir).requests["id"])

    return asyncio.run(go())


def test_a_closed_loop_holds_its_users_requests_not_the_plan(
    tmp_path: Path, built: weakref.WeakSet[RequestSpec]
) -> None:
    plan = _plan(300)
    count = _Count(built)
    sent = _send(plan, tmp_path, count)
    assert sorted(sent) == [f"r{i:04d}" for i in range(300)] and count.sends == 300
    # each user holds the request it is sending; a list of the plan would hold all 300
    assert 1 <= count.most <= USERS + 1


def test_sessions_index_their_turns_without_building_them(
    built: weakref.WeakSet[RequestSpec],
) -> None:
    plan = _plan(200, sessions=True)
    book = SessionBook(plan)
    assert len(built) == 0
    first = plan.requests[0]
    following = book.next_turn(first)
    assert following == plan.requests[1] and following.turn == 1
    assert book.next_turn(following) is None


def test_splitting_the_plan_builds_no_request(built: weakref.WeakSet[RequestSpec]) -> None:
    plan = _plan(500, gap_s=0.01)
    warmups, open_loop, closed = split_plan(plan)
    assert (len(warmups), len(open_loop), len(closed)) == (0, 500, 0)
    assert len(built) == 0
    assert [r.id for r in open_loop][:3] == ["r0000", "r0001", "r0002"]
