"""The run's clock: seconds since t=0 on the monotonic clock, with a wall-clock anchor.

Every timestamp of a run (intended and actual sends, each chunk, every server and GPU
sample) is taken from one ``RunClock`` so that client events and server samples line up
on one axis. ``perf_counter`` is monotonic and has sub-microsecond resolution; the wall
anchor lets a reader map run time to absolute time (for a Prometheus query, a log).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class RunClock:
    t0: float = field(default_factory=time.perf_counter)
    wall_t0: float = field(default_factory=time.time)

    def now(self) -> float:
        """Seconds since t=0."""
        return time.perf_counter() - self.t0

    def to_wall(self, t_s: float) -> float:
        """Unix time of a run timestamp."""
        return self.wall_t0 + t_s

    def from_perf(self, perf: float) -> float:
        """Run time of a raw ``time.perf_counter()`` reading."""
        return perf - self.t0
