"""When requests are sent: open loop, the client-side cap, closed loop, warm-up, sessions."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from loadgen_servers import Server, generator, run_against, specs
from scipy.stats import theilslopes

from runtime.clock import RunClock
from runtime.timing import (
    DEFAULT_SPIN_S,
    MAX_SPIN_S,
    SPIN_CPU_SHARE,
    SPIN_MARGIN_S,
    Waker,
    sleep_until,
)
from workloads.plan import Prompt, RequestSpec


def _max_in_flight(requests: pd.DataFrame) -> int:
    """Most requests between their send and their end at any moment."""
    events = sorted(
        [(t, 1) for t in requests["sent_s"]] + [(t, -1) for t in requests["end_s"]],
        key=lambda e: (e[0], e[1]),
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.timing
def test_coordinated_omission_is_measured_not_hidden(tmp_path: Path) -> None:
    """Above capacity with a client-side cap of 1: the backlog shows in intended-time TTFT."""
    server = generator(ttft_s=0.04, itl_s=0.005, serial=True)  # ~55 ms a request: ~18/s
    plan = specs(14, max_tokens=4, gap_s=0.02)  # 50 requests/s

    async def go():
        async with RunqueueSampler() as waits, Server(server) as url:
            clock_start = time.perf_counter()  # the run's clock starts just after
            ran = await run_against(url, plan, tmp_path, max_concurrency=1)
        return clock_start, waits, ran

    clock_start, waits, (result, requests, _, _) = asyncio.run(go())
    assert result.status == "complete" and (requests["status"] == "ok").all()
    requests = requests.sort_values("intended_s")
    ttft_intended = (requests["first_token_s"] - requests["intended_s"]).to_numpy()
    ttft_sent = (requests["first_token_s"] - requests["sent_s"]).to_numpy()
    lag = (requests["sent_s"] - requests["intended_s"]).to_numpy()
    # intended times stay the schedule: 20 ms apart
    assert np.allclose(np.diff(requests["intended_s"].to_numpy()), 0.02, atol=1e-9)
    # sent-time TTFT is flat (the server's own 40 ms) ...
    index = np.arange(len(requests))
    assert abs(theilslopes(ttft_sent, index).slope) < 0.004
    assert 0.035 < np.median(ttft_sent) < 0.1
    # ... while intended-time TTFT grows with the backlog, about 35 ms per request
    assert theilslopes(ttft_intended, index).slope > 0.02
    assert ttft_intended[-1] > 5 * ttft_sent[-1]
    # the wait in the client is the dispatch lag: the first request, with no backlog ahead
    # of it, has none of its own (a CPU the busy machine gave to others set aside)
    own = waits.own_lag(clock_start, requests)
    assert lag[-1] > 0.3 and own[0] < 0.01, (lag[-1], own[0], lag[0])
    assert _max_in_flight(requests) == 1
    # ... and almost all of it is the wait for the cap's one slot, which the client records
    # (released_s): from its slot to its send, each request's own lag is small
    slot_wait = (requests["released_s"] - requests["intended_s"]).to_numpy()
    assert (slot_wait >= 0).all() and slot_wait[-1] > 0.3
    from_slot = waits.own_lag(clock_start, requests.assign(intended_s=requests["released_s"]))
    assert np.median(from_slot) < 0.01, np.median(from_slot)


@pytest.mark.timing
def test_open_loop_sends_on_time_and_never_early(tmp_path: Path) -> None:
    """Never early, always; on time judged against the moments the kernel ran the event
    loop's thread: of each request's lag, the part during which that thread was waiting
    for a CPU (its runqueue wait grew: the machine was busy, which no sender can help) is
    set aside, and what is left, the sender's own lateness, must be under 3 ms (median)."""
    plan = specs(60, max_tokens=1, gap_s=0.004)

    async def go():
        async with RunqueueSampler() as waits, Server(generator(0.0, 0.0)) as url:
            clock_start = time.perf_counter()  # the run's clock starts just after
            ran = await run_against(url, plan, tmp_path)
        return clock_start, waits, ran

    clock_start, waits, (_, requests, _, _) = asyncio.run(go())
    lag = (requests["sent_s"] - requests["intended_s"]).to_numpy()
    assert (lag >= 0).all()
    own = waits.own_lag(clock_start, requests)
    assert np.median(own) < 0.003, (np.median(own), np.median(lag))


class RunqueueSampler:
    """The event loop thread's runqueue wait, sampled on the loop every millisecond while
    in use; ``own_lag`` sets the part of each request's dispatch lag (intended time to
    send) during which the thread waited for a CPU aside, bracketing the span by the
    samples either side of it."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (perf_counter, runqueue wait)

    async def _sample(self) -> None:
        while True:
            self.samples.append((time.perf_counter(), _runqueue_wait_s()))
            await asyncio.sleep(0.001)

    async def __aenter__(self) -> RunqueueSampler:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._task.cancel()

    def own_lag(self, clock_start: float, requests: pd.DataFrame) -> np.ndarray:
        at, waited = (np.array(column) for column in zip(*self.samples, strict=True))
        due = clock_start + requests["intended_s"].to_numpy()
        sent = clock_start + requests["sent_s"].to_numpy()
        before = waited[np.clip(np.searchsorted(at, due, side="right") - 1, 0, at.size - 1)]
        after = waited[np.clip(np.searchsorted(at, sent, side="left"), 0, at.size - 1)]
        return (sent - due) - (after - before)


def _runqueue_wait_s() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (the kernel's
    schedstat): a wake-up during which it grew was late because the machine was busy,
    which no timer can help."""
    return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9


#: Runqueue wait during one wake-up above which the sample judges the machine, not the timer.
BUSY_S = 1e-4


@pytest.mark.timing
def test_timer_is_finer_than_the_event_loop() -> None:
    """asyncio.sleep wakes on whole milliseconds; sleep_until must land well inside one.
    Judged on wake-ups the machine gave the CPU to on time (a busy machine's others are
    set aside: 40 clean ones are collected, from at most 400)."""
    clock = RunClock()

    async def overshoot(spin_s: float) -> np.ndarray:
        late: list[float] = []
        for i in range(1, 401):
            target = clock.now() + 0.003 + (i % 7) * 1e-4
            waited = _runqueue_wait_s()
            await sleep_until(clock.now, target, spin_s)
            lateness = clock.now() - target
            assert lateness >= 0
            if _runqueue_wait_s() - waited < BUSY_S:
                late.append(lateness)
            if len(late) == 40:
                break
        if len(late) < 10:
            pytest.skip(f"only {len(late)} of 400 wake-ups got the CPU on time: too busy to judge")
        return np.array(late)

    plain = asyncio.run(overshoot(0.0))
    spun = asyncio.run(overshoot(DEFAULT_SPIN_S))
    assert np.median(spun) < 0.5 * np.median(plain), (np.median(spun), np.median(plain))
    assert np.median(spun) < 2e-4


@pytest.mark.timing
def test_the_waker_widens_its_window_to_how_late_wake_ups_run() -> None:
    """A loop held up for 6 ms at each wake-up (as a VM's idle vCPU is) teaches the Waker
    to wake that much earlier, so that later deadlines are met by spinning, not missed."""
    clock = RunClock()
    waker = Waker(clock.now)
    assert waker.spin_s == DEFAULT_SPIN_S  # nothing learnt yet

    late, busy = asyncio.run(_stalled_wakeups(waker, gap_s=0.1, stall_s=0.006, n=12))
    assert min(late) >= 0
    assert late[0] > 0.003  # the first deadline was missed: the window was too narrow
    assert waker.spin_s >= 0.006 + SPIN_MARGIN_S and waker.spin_s <= MAX_SPIN_S
    assert waker.wakeups == 12
    # later ones spin through the stall: judged on the Waker's own lateness, what is left
    # of each once the time the thread waited for a CPU during it is set aside
    own = np.array(late[2:]) - np.array(busy[2:])
    assert np.median(own) < 1e-3, (late, busy)


@pytest.mark.timing
def test_the_waker_spins_no_wider_than_its_cpu_share_allows() -> None:
    """Deadlines every 5 ms: a 6 ms window would spin all the time, so it stays narrow."""
    waker = Waker(RunClock().now)
    asyncio.run(_stalled_wakeups(waker, gap_s=0.005, stall_s=0.006, n=20))
    assert waker.recent_late_max_s > 0.004  # the wake-ups were late ...
    assert waker.spin_s <= max(DEFAULT_SPIN_S, SPIN_CPU_SHARE * 0.005 * 1.5)  # ... yet


async def _stalled_wakeups(
    waker: Waker, gap_s: float, stall_s: float, n: int
) -> tuple[list[float], list[float]]:
    """Wait for ``n`` deadlines ``gap_s`` apart, the loop blocked for ``stall_s`` just
    before each wake-up (as a VM delays an idle vCPU's); how late each wait returned, and
    how long the thread waited for a CPU during it."""
    late, busy = [], []
    loop = asyncio.get_running_loop()
    for _ in range(n):
        target = waker.now() + gap_s
        loop.call_at(loop.time() + gap_s - waker.spin_s - 1e-4, time.sleep, stall_s)
        waited = _runqueue_wait_s()
        await waker.until(target)
        late.append(waker.now() - target)
        busy.append(_runqueue_wait_s() - waited)
    return late, busy


@pytest.mark.timing
def test_bursts_are_sent_in_one_pass(tmp_path: Path) -> None:
    """20 bursts of 20 simultaneous requests: each burst leaves together.

    A timer that sent one request per wake-up (~1 ms) would spread a burst over 20 ms
    and fall 0.4 s behind by the end.
    """
    plan = [replace(s, intended_s=(i // 20) * 0.01) for i, s in enumerate(specs(400, max_tokens=1))]

    async def go():
        async with Server(generator(0.0, 0.0)) as url:
            return await run_against(url, plan, tmp_path)

    result, requests, _, _ = asyncio.run(go())
    assert result.sent == 400 and (requests["status"] == "ok").all()
    lag = (requests["sent_s"] - requests["intended_s"]).to_numpy()
    assert (lag >= 0).all()
    spread = requests.groupby("intended_s")["sent_s"].agg(lambda t: t.max() - t.min())
    assert len(spread) == 20 and spread.median() < 0.012, spread.median()


def test_closed_loop_users_serve_the_plan_in_order(tmp_path: Path) -> None:
    async def go():
        async with Server(generator(0.02, 0.002)) as url:
            return await run_against(url, specs(8, max_tokens=3), tmp_path, concurrency=2)

    _, requests, _, _ = asyncio.run(go())
    assert (requests["status"] == "ok").all()
    by_send = requests.sort_values("sent_s")
    assert by_send["id"].tolist() == [f"r{i}" for i in range(8)]
    assert _max_in_flight(requests) == 2
    # A closed-loop request is intended when its user is free: the end of the request
    # that user finished (each later request's intended time is one of the ends before
    # it), and sent right then. The first two are intended at the start and each opens
    # its connection first (this harness opens none ahead), so their send is not checked.
    later = by_send.iloc[2:]
    ends = by_send["end_s"].to_numpy()
    for _, row in later.iterrows():
        freed = ends[ends <= row["intended_s"] + 1e-9]
        assert freed.size and row["intended_s"] - freed.max() < 0.005, row
    assert ((later["sent_s"] - later["intended_s"]) < 0.05).all()


def test_warmup_goes_first_and_is_marked(tmp_path: Path) -> None:
    plan = specs(5, max_tokens=2, gap_s=0.01)
    plan[:2] = [replace(spec, warmup=True, intended_s=None) for spec in plan[:2]]

    async def go():
        async with Server(generator(0.03, 0.002)) as url:
            return await run_against(url, plan, tmp_path)

    result, requests, _, _ = asyncio.run(go())
    warm = requests[requests["warmup"]]
    measured = requests[~requests["warmup"]]
    assert sorted(warm["id"]) == ["r0", "r1"] and len(measured) == 3
    assert warm["end_s"].max() <= result.schedule_t0_s <= measured["intended_s"].min()
    offsets = measured.sort_values("id")["intended_s"] - result.schedule_t0_s
    assert np.allclose(offsets, [0.02, 0.03, 0.04])  # the plan's times, from the new t=0


def _session(
    own: list[list[int]], texts: list[str] | None = None, think_s: float = 0.01, session: int = 0
) -> list[RequestSpec]:
    """One session: turn k's own new tokens are ``own[k]``, 3 output tokens a turn."""
    return [
        RequestSpec(
            f"s{session}t{k}",
            Prompt.of_tokens(tokens),
            3,
            intended_s=0.0 if k == 0 else None,
            session=session,
            turn=k,
            think_time_s=think_s,
            text=texts[k] if texts else None,
        )
        for k, tokens in enumerate(own)
    ]


def test_session_turns_carry_the_real_history(tmp_path: Path) -> None:
    server = generator(0.01, 0.002)
    own = [[11, 12, 13], [21, 22], [31]]
    plan = _session(own, think_s=0.05)

    async def go():
        async with Server(server) as url:
            return await run_against(url, plan, tmp_path)

    _, requests, _, _ = asyncio.run(go())
    prompts = [body["prompt"] for body in server.bodies]
    returned = [1000, 1001, 1002]
    assert prompts[0] == own[0]
    assert prompts[1] == own[0] + returned + own[1]
    assert prompts[2] == prompts[1] + returned + own[2]
    rows = requests.set_index("id")
    for k in (1, 2):
        gap = rows.loc[f"s0t{k}", "sent_s"] - rows.loc[f"s0t{k - 1}", "end_s"]
        assert 0.05 <= gap < 0.2
        assert rows.loc[f"s0t{k}", "intended_s"] == rows.loc[f"s0t{k - 1}", "end_s"] + 0.05
    assert rows.loc["s0t2", "prompt_tokens"] == len(prompts[2])


def test_a_later_turn_due_after_the_duration_is_dropped_without_waiting_its_think_time(
    tmp_path: Path,
) -> None:
    """``--duration`` ends a multi-turn run when the last request in flight ends: a turn
    whose think time runs past the deadline is not waited for (it had held a run 8 s
    past its last answer), while turns due before the deadline are still sent."""
    quick = _session([[11], [12], [13]], think_s=0.02, session=0)
    slow = _session([[21], [22]], think_s=60.0, session=1)

    async def go():
        async with Server(generator(0.005, 0.001)) as url:
            started = time.perf_counter()
            ran = await run_against(url, quick + slow, tmp_path, duration_s=3.0)
            return time.perf_counter() - started, ran

    elapsed, (result, requests, _, _) = asyncio.run(go())
    assert result.status == "complete"
    assert sorted(requests["id"]) == ["s0t0", "s0t1", "s0t2", "s1t0"]
    assert (requests["status"] == "ok").all()
    assert elapsed < 30.0, elapsed  # the slow session's next turn was due 60 s on


def test_later_turns_keep_what_they_composed_and_the_send_path_expects_nothing(
    tmp_path: Path,
) -> None:
    """A later turn's composed prompt is kept (token ids, for the session's oracle); no
    record gets an expectation the plan did not carry."""

    async def go():
        async with Server(generator(0.005, 0.001)) as url:
            plan = _session([[11, 12, 13, 14, 15], [21, 22], [31]])
            return await run_against(url, plan, tmp_path)

    result, requests, _, _ = asyncio.run(go())
    assert requests["expected_cached_tokens"].isna().all()
    composed = {k: p.token_ids(8192).tolist() for k, p in result.composed_prompts.items()}
    returned = [1000, 1001, 1002]
    assert composed["s0t1"] == [11, 12, 13, 14, 15, *returned, 21, 22]
    assert composed["s0t2"] == composed["s0t1"] + returned + [31]
    assert set(composed) == {"s0t1", "s0t2"}


def test_text_sessions_carry_the_returned_text(tmp_path: Path) -> None:
    server = generator(0.005, 0.001)  # returns "ab" per token

    async def go():
        async with Server(server) as url:
            plan = _session([[1], [2], [3]], texts=["Hello.", " Next?", " Last."])
            return await run_against(url, plan, tmp_path)

    asyncio.run(go())
    prompts = [body["prompt"] for body in server.bodies]
    assert prompts == ["Hello.", "Hello.ababab Next?", "Hello.ababab Next?ababab Last."]
