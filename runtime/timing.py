"""Waiting until a scheduled send time more precisely than the event loop's timer.

asyncio's timers wake through ``epoll_wait``, whose timeout is whole milliseconds
rounded up, so ``asyncio.sleep`` overshoots by up to ~1 ms; on a virtual machine whose
idle vCPU the host must first reschedule, it overshoots by several milliseconds (seen
here: p50 1.5–2.7 ms, p99 5–10 ms, on an idle two-core VM whose ``time.sleep`` is
0.6 ms late). For an open-loop schedule that is a systematic dispatch lag. So: sleep
until a spin window before the deadline, then yield to the loop (``sleep(0)``, which
still serves other streams) until the deadline passes. The spin costs CPU only in that
last window, never while the client is idle.

``Waker`` sizes the window from how late this machine's own wake-ups have been: a
fixed window wide enough for a VM would burn CPU on a quiet host, and one narrow
enough for a quiet host would be late on a VM. Spinning is paid for in client CPU, so
the window is also held to a share of a core at the rate deadlines come: at 10 sends a
second it may widen to several milliseconds, at 150 it stays at the floor (widening there
took the client from 41 % to 78 % of a core for no gain: a busy loop's late wake-ups are
its own work, not the machine's).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

#: The narrowest spin window: asyncio's own millisecond rounding plus a margin.
DEFAULT_SPIN_S = 0.0015
#: The widest: beyond this a machine is too loaded for spinning to help.
MAX_SPIN_S = 0.02
#: Wake-ups remembered to size the window (the window covers the latest of them).
WAKE_HISTORY = 64
#: Added to the latest remembered overshoot.
SPIN_MARGIN_S = 0.0005
#: Share of a core that spinning may take, at the rate deadlines are being waited for.
SPIN_CPU_SHARE = 0.1


async def sleep_until(
    now: Callable[[], float], t_s: float, spin_s: float = DEFAULT_SPIN_S
) -> float | None:
    """Return as soon as possible after time ``t_s`` on the clock ``now``, never before it.

    Returns how late the coarse sleep woke against what it asked for, or ``None`` when
    the deadline was within ``spin_s`` and it did not sleep.
    """
    wake_at = t_s - spin_s
    late: float | None = None
    delay = wake_at - now()
    if delay > 0:
        await asyncio.sleep(delay)
        late = now() - wake_at
    while now() < t_s:
        await asyncio.sleep(0)
    return late


class Waker:
    """``sleep_until`` with a spin window as wide as this machine's wake-ups run late.

    One per load run, shared by every send of it, so that each wake-up
    teaches the others. ``now`` is the clock deadlines are given on.
    """

    def __init__(self, now: Callable[[], float], floor_s: float = DEFAULT_SPIN_S) -> None:
        self.now = now
        self.floor_s = floor_s
        self._late: deque[float] = deque(maxlen=WAKE_HISTORY)
        self._calls: deque[float] = deque(maxlen=WAKE_HISTORY)
        self.wakeups = 0
        self.widest_s = floor_s

    @property
    def spin_s(self) -> float:
        """The window now: the latest remembered overshoot plus a margin, no wider than
        ``SPIN_CPU_SHARE`` of a core allows at the recent rate of waits, nor ``MAX_SPIN_S``;
        never narrower than the floor."""
        widest = min(MAX_SPIN_S, max(self._late, default=0.0) + SPIN_MARGIN_S)
        if len(self._calls) > 1 and self._calls[-1] > self._calls[0]:
            rate = (len(self._calls) - 1) / (self._calls[-1] - self._calls[0])
            widest = min(widest, SPIN_CPU_SHARE / rate)
        return max(self.floor_s, widest)

    async def until(self, t_s: float) -> None:
        """Return as soon as possible after time ``t_s``, never before it."""
        self._calls.append(self.now())
        spin = self.spin_s
        self.widest_s = max(self.widest_s, spin)
        late = await sleep_until(self.now, t_s, spin)
        if late is not None:
            self._late.append(late)
            self.wakeups += 1

    @property
    def recent_late_max_s(self) -> float:
        """How late the latest wake-ups (``WAKE_HISTORY``) ran at worst, in seconds (for
        run.json's ``result.client.timer``, with ``wakeups``, ``spin_s`` and ``widest_s``)."""
        return max(self._late, default=0.0)
