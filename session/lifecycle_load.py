"""When an inference-perf client sent its requests, read from its resolved ``results/config.yaml``.

How inference-perf's load generator sends an open-loop run, and how the replay follows:

* A stage sends ``int(rate · duration)`` requests. Under ``load.type: constant`` their gaps
  are exponential draws scaled to sum to the stage's duration (the timer's "small amount
  of random noise" is a Poisson process's gaps, so a "constant" run's arrivals are the
  Poisson arrivals its study's protocol describes); under ``poisson`` each second gets a
  Poisson count of them, spread so within it, until the stage's count is sent.
* A stage begins once every request of the one before it has ended (finished or timed
  out), ``load.interval`` (default 1 s) and another second later: the client waits for a
  stage to drain (``session.against.StageRelease`` replays that).
* A ``load.sweep`` generates its stages while it runs and does not write them back: the
  resolved configuration keeps the stages it was given (none, usually). Each generated
  stage's rate is in its ``stage_N`` file (``load_summary.requested_rate``) and each lasts
  ``sweep.stage_duration`` (default 180 s); the saturation probe before them is in none.
* The client has at most ``num_workers`` × ``worker_max_concurrency`` requests in flight (a
  permit per request, taken before a worker picks it up): an open-loop request past that
  waits for one to end, and its latencies count from its send, not its schedule.
* ``load.request_timeout`` is the client's timeout; without one, its HTTP client's total
  timeout of 300 s applies (the failures' ``request_latency`` starts at 300.0 s in the
  overloaded runs).
* ``load.type: concurrent`` stages are closed loops: ``num_requests`` requests, at most
  ``concurrency_level`` of them in flight, the next sent as one ends (inference-perf
  schedules them over one second and gates each on a permit; before its 2026-01-26 fix a
  worker held one permit too many, so a run of an older client had up to ``num_workers``
  more in flight than its level says). Trace replays are refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from session.lifecycle_values import finite, positive_whole
from workloads.errors import InputError

#: The client's total timeout when ``request_timeout`` is null (aiohttp's default).
DEFAULT_TIMEOUT_S = 300.0
#: A generated sweep stage's length when ``sweep.stage_duration`` is not given.
DEFAULT_SWEEP_STAGE_S = 180.0


@dataclass(frozen=True)
class Stage:
    """One load stage: requests per second for so many seconds."""

    rate: float
    duration_s: float
    #: Requests in flight at most (None: no limit): a closed-loop stage's level, or the
    #: client's own cap on an open-loop stage where the stage could reach it.
    concurrency: int | None = None

    @property
    def requests(self) -> int:
        return int(self.rate * self.duration_s)


@dataclass(frozen=True)
class LoadPlan:
    """The arrival process, the stages, the pause between stages and the timeout."""

    arrivals: str
    stages: tuple[Stage, ...]
    interval_s: float
    timeout_s: float


def _seconds(load: dict[str, Any], key: str, default: float, where: Path, flag: str) -> float:
    value = load.get(key)
    if value is None:
        return default
    if not finite(value) or value < 0:
        raise InputError(flag, f"{where}: load.{key} is {value!r}", "a number of seconds >= 0")
    return float(value)


def _stage(rate: Any, duration: Any, what: str, where: Path, flag: str) -> Stage:
    if not (finite(rate) and finite(duration) and rate > 0 and duration > 0):
        raise InputError(flag, f"{where}: {what}", "each stage needs rate > 0 and duration > 0")
    return Stage(float(rate), float(duration))


def _closed(stage: Any, i: int, where: Path, flag: str) -> Stage:
    """A ``concurrent`` stage: its requests sent as one second's worth (inference-perf's
    rate = num_requests, duration = 1), at most ``concurrency_level`` in flight."""
    count = stage.get("num_requests") if isinstance(stage, dict) else None
    level = stage.get("concurrency_level") if isinstance(stage, dict) else None
    if not (positive_whole(count) and positive_whole(level)):
        raise InputError(flag, f"{where}: load.stages[{i}] is {stage!r}",
                         "give num_requests > 0 and concurrency_level > 0")  # fmt: skip
    return Stage(float(count), 1.0, int(level))


def _client_cap(load: dict[str, Any]) -> int | None:
    """The client's requests in flight at most, where its configuration says (None: not
    said, or no limit)."""
    workers, each = load.get("num_workers"), load.get("worker_max_concurrency")
    if positive_whole(workers) and positive_whole(each):
        return int(workers) * int(each)
    return None


def read_load(
    client: dict[str, Any], stage_files: dict[int, dict[str, Any]], where: Path, flag: str
) -> LoadPlan:
    """The load of a resolved client configuration (``stage_files``: each stage's lifecycle
    metrics by index, where a sweep's rates are); ``InputError`` naming ``flag`` for a
    load the replay cannot send."""
    load = client.get("load")
    if not isinstance(load, dict):
        raise InputError(
            flag, f"{where} has no load section", "give an inference-perf results folder"
        )
    arrivals = str(load.get("type") or "constant")
    if arrivals not in ("constant", "poisson", "concurrent"):
        raise InputError(flag, f"{where}: load.type {arrivals!r} is not replayed",
                         "replay a constant, poisson or concurrent run")  # fmt: skip
    sweep = load.get("sweep")
    if arrivals == "concurrent":
        stages = [_closed(s, i, where, flag) for i, s in enumerate(load.get("stages") or [])]
        if not stages:
            raise InputError(flag, f"{where}: load has no stages", "give the resolved config.yaml")
    elif sweep:
        length = sweep.get("stage_duration") if isinstance(sweep, dict) else None
        length = DEFAULT_SWEEP_STAGE_S if length is None else length
        summaries = [f.get("load_summary") for f in stage_files.values()]
        rates = [s.get("requested_rate") if isinstance(s, dict) else None for s in summaries]
        if not rates:
            raise InputError(flag, f"{where}: load.sweep ran stages no stage_N file records",
                             "give the folder with its stage_*_lifecycle_metrics.json")  # fmt: skip
        stages = [
            _stage(rate, length, f"sweep stage {i}: requested_rate {rate!r}, "
                   f"stage_duration {length!r}", where, flag)
            for i, rate in enumerate(rates)
        ]  # fmt: skip
    else:
        given = load.get("stages") or []
        if not given:
            raise InputError(flag, f"{where}: load has no stages", "give the resolved config.yaml")
        stages = [
            _stage(s.get("rate") if isinstance(s, dict) else None,
                   s.get("duration") if isinstance(s, dict) else None,
                   f"load.stages[{i}] is {s!r}", where, flag)
            for i, s in enumerate(given)
        ]  # fmt: skip
    cap = _client_cap(load)
    if arrivals != "concurrent" and cap is not None:
        stages = [Stage(s.rate, s.duration_s, cap if cap < s.requests else None) for s in stages]
    timeout = load.get("request_timeout")
    if timeout is not None and (not finite(timeout) or timeout <= 0):
        raise InputError(flag, f"{where}: load.request_timeout is {timeout!r}", "seconds > 0")
    return LoadPlan(
        arrivals=arrivals,
        stages=tuple(stages),
        interval_s=_seconds(load, "interval", 1.0, where, flag),
        timeout_s=float(timeout or DEFAULT_TIMEOUT_S),
    )


def stage_arrivals(stages: list[Stage], arrivals: str, seed: int = 0) -> list[np.ndarray]:
    """Each stage's send times, in seconds from the stage's start, drawn as inference-perf's
    load timers draw them (the module docstring; a closed-loop stage's are its schedule,
    which its permits then hold back)."""
    rng = np.random.default_rng(seed)
    out = []
    for stage in stages:
        count = stage.requests
        if arrivals == "poisson":
            times: list[np.ndarray] = []
            second, drawn = 0.0, 0
            while drawn < count:
                n = int(rng.poisson(stage.rate))
                if n:
                    times.append(second + _filled(rng, n, 1.0))
                    drawn += n
                second += 1.0
            out.append(np.concatenate(times)[:count] if times else np.zeros(0))
        else:
            out.append(_filled(rng, count, stage.duration_s))
    return out


def _filled(rng: np.random.Generator, count: int, span_s: float) -> np.ndarray:
    """``count`` send times whose exponential gaps are scaled to sum to ``span_s``."""
    if count <= 0:
        return np.zeros(0)
    gaps = rng.exponential(1.0, size=count)
    return np.cumsum(gaps * (span_s / gaps.sum()))
