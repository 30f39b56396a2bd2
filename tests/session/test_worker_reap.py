"""``session.workers.join_all``: workers that outlive a stop are joined within one grace
period in all, then killed, so a second stop signal, which waits for this, ends soon."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from session.workers import join_all


@pytest.mark.timing
def test_hung_workers_share_one_grace_period_then_are_killed() -> None:
    context = multiprocessing.get_context("spawn")
    hung = [context.Process(target=time.sleep, args=(60,), daemon=True) for _ in range(3)]
    for process in hung:
        process.start()
    grace_s = 0.5
    start = time.monotonic()
    join_all(hung, grace_s)
    elapsed = time.monotonic() - start
    assert all(not process.is_alive() for process in hung)
    assert all(process.exitcode == -9 for process in hung)  # killed, not ended
    # one grace period in all: a grace period each would take 1.5 s
    assert grace_s <= elapsed < 2 * grace_s, elapsed


def test_workers_that_end_within_the_grace_period_are_not_killed() -> None:
    context = multiprocessing.get_context("spawn")
    quick = [context.Process(target=time.sleep, args=(0,)) for _ in range(2)]
    for process in quick:
        process.start()
    join_all(quick, 30.0)
    assert [process.exitcode for process in quick] == [0, 0]
