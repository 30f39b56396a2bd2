"""The one prefix oracle of a run (``session.bench_oracle.RunOracle``) and the frozen plan.

* ``bench`` sends a frozen plan, equal before and after the run, and ``requests.parquet``'s
  ``expected_cached_tokens`` are exactly one oracle pass's: before sending for an open
  loop; after the run, over the sent prefix of the plan, for a closed loop bounded by a
  duration;
* the send path computes no expectation: a plan carrying values gets exactly those in
  its records, with no observer and whatever they are, and a later turn none;
* a session is replayed from what was recorded: each turn expects the history it sent.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
from bench_support import bench, read_json, requests_table
from loadgen_servers import Server, generator, run_against
from oracle_races import AS_IT_HAPPENED, assert_cached_as_expected

from runfmt.run_sections import Geometry
from session import bench_runner
from session.bench_oracle import RunOracle
from session.bench_plan import build_bench_plan
from workloads.oracle import plan_order_expectations
from workloads.plan import PackedRequests, Plan, Prompt, RequestSpec

SHARED = {"groups": 3, "prefix_len": 128, "suffix_len": 16, "output_len": 2}


@pytest.mark.parametrize(
    "load",
    [
        {"num_requests": 24, "arrival": "constant", "rate": 40},  # annotated before sending
        {"concurrency": 2, "duration": 1.0},  # a prefix of a generous plan: after the run
    ],
    ids=["open-loop", "closed-loop-for-a-duration"],
)
def test_bench_sends_a_frozen_plan_and_records_one_oracle_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load: dict
) -> None:
    built: list[tuple[Plan, Plan]] = []

    def keep(*args, **kwargs) -> Plan:
        plan = build_bench_plan(*args, **kwargs)
        built.append((plan, copy.deepcopy(plan)))
        return plan

    monkeypatch.setattr(bench_runner, "build_bench_plan", keep)
    run = tmp_path / "run"
    outcome = bench("shared-prefix", run, engine=("fixed_step_s=0.002",), overrides=SHARED | load)
    assert outcome.status == "complete"
    ((plan, before),) = built
    assert plan == before and isinstance(plan.requests, PackedRequests)
    with pytest.raises(FrozenInstanceError):
        plan.requests[0].expected_cached_tokens = 0  # type: ignore[misc]

    requests = requests_table(run).set_index("id")
    order = {r.id: i for i, r in enumerate(plan.requests)}
    sent = sorted(requests.index, key=order.__getitem__)
    assert len(sent) >= 6
    info = read_json(run, "run.json")
    shape, target = info["oracle"], info["target"]
    one_pass = plan_order_expectations(
        plan,
        shape["block_size"],
        shape["num_blocks"],
        target["vocab_size"],
        target["model"],
        count=order[sent[-1]] + 1,
    )
    recorded = requests.loc[sent, "expected_cached_tokens"].astype(int).tolist()
    assert recorded == [one_pass[order[i]] for i in sent]
    assert sum(recorded) > 0
    # the engine's, on the wall clock: two users (or a busy machine) can race a group's prefix
    assert assert_cached_as_expected(requests.reset_index(), related="group") >= 1


def _session(own: list[list[int]]) -> list[RequestSpec]:
    return [
        RequestSpec(
            f"t{k}", Prompt.of_tokens(tokens), 3, 0.0 if k == 0 else None, session=0, turn=k
        )
        for k, tokens in enumerate(own)
    ]


def test_the_send_path_copies_the_plans_values_and_computes_none(tmp_path: Path) -> None:
    """Values no oracle would give (7, 1007) reach the records as they are, with no
    observer; a session's turns, which carry none, get none: nothing on the way computes one."""
    plan = [
        RequestSpec("a", Prompt.of_tokens([1, 2]), 2, 0.0, expected_cached_tokens=7),
        RequestSpec("b", Prompt.of_tokens([1, 2]), 2, 0.01, expected_cached_tokens=1007),
        *_session([[1, 2], [3]]),
    ]

    async def go():
        async with Server(generator(0.002, 0.001)) as url:
            return await run_against(url, plan, tmp_path)

    _, requests, _, _ = asyncio.run(go())
    expected = requests.set_index("id")["expected_cached_tokens"]
    assert len(expected) == 4 and expected["a"] == 7 and expected["b"] == 1007
    assert expected[["t0", "t1"]].isna().all()


def test_a_session_is_replayed_with_the_history_it_sent(tmp_path: Path) -> None:
    """Block size 4: turn 0 (5 tokens) leaves 5 + 2 returned tokens (the last one never
    enters the cache): one block; turn 1 = 5 + 3 + 2 = 10 tokens finds 4 and leaves 12;
    turn 2 = 10 + 3 + 1 = 14 tokens finds 12."""
    plan = _session([[11, 12, 13, 14, 15], [21, 22], [31]])

    async def go():
        async with Server(generator(0.005, 0.001)) as url:
            return await run_against(url, plan, tmp_path)

    result, requests, _, _ = asyncio.run(go())
    oracle = RunOracle(Geometry(4, None, "test"), "tiny-llama", 8192)
    expected = oracle.after_run(Plan("test", 0, plan), requests, result.composed_prompts)
    assert expected == {"t0": 0, "t1": 4, "t2": 12}


@pytest.mark.parametrize("workers", [1, 2])
def test_sessions_replayed_after_the_run_equal_the_engines_cached_tokens(
    tmp_path: Path, workers: int
) -> None:
    """Token-id sessions (a shared system prompt, each turn's history the engine's own
    answer) from one process and from two: the later turns' composed prompts come back
    from the workers, and every request's expectation is the engine's ``cached_tokens``."""
    run = tmp_path / "run"
    overrides = {"num_requests": 12, "turns": 3, "think_time": 0.05, "output_len": 24}
    outcome = bench("multi-turn", run, engine=("fixed_step_s=0.002",), overrides=overrides,
                    workers=workers)  # fmt: skip
    assert outcome.status == "complete"
    requests = requests_table(run)
    assert len(requests) == 12 and (requests["status"] == "ok").all()
    later = requests[requests["turn"] >= 1]
    assert len(later) == 8 and (later["cached_tokens"] > 0).all()
    assert read_json(run, "run.json")["load"]["workers"] == workers
    assert assert_cached_as_expected(requests, AS_IT_HAPPENED) >= 1
