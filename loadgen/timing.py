"""Waiting until a scheduled send time more precisely than the event loop's timer.

asyncio's timers wake through ``epoll_wait``, whose timeout is whole milliseconds
rounded up, so ``asyncio.sleep`` overshoots by up to ~1 ms. For an open-loop schedule
that is a systematic dispatch lag, and at a high rate a client that sends one request
per wake-up under-delivers. So: sleep until ``spin_s`` before the deadline, then yield to
the loop (``sleep(0)``, which still serves other streams) until the deadline passes. The
spin costs CPU only in that last window, never while the client is idle.
"""

from __future__ import annotations

import asyncio

from loadgen.clock import RunClock

#: How long before a deadline the timer stops sleeping and starts yielding.
DEFAULT_SPIN_S = 0.0015


async def sleep_until(clock: RunClock, t_s: float, spin_s: float = DEFAULT_SPIN_S) -> None:
    """Return as soon as possible after run time ``t_s``, never before it."""
    delay = t_s - clock.now()
    if delay > spin_s:
        await asyncio.sleep(delay - spin_s)
    while clock.now() < t_s:
        await asyncio.sleep(0)
