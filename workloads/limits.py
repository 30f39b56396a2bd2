"""Caps on every size, count and rate a user can give, and the one check that applies them.

A plan is built in memory before the first request is sent (so the load generator can
dispatch from a schedule), a closed-loop user is a task with its own connection, a
pooled KV oracle keeps a table per block: each of these is bounded here, with the reason
in the message, and checked before anything is written or allocated. NaN is never a
meaningful number; infinity only where a flag says what it means (``--rate inf``: every
request at t=0, as in ``vllm bench serve``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workloads.errors import InputError

#: Requests in one plan (warm-up included): each is a row in memory before the run starts.
MAX_PLAN_REQUESTS = 10**7
#: Closed-loop users or open-loop requests in flight: each is a task and a connection.
MAX_CONCURRENCY = 100_000
#: Seconds: a week is longer than any benchmark; more is a typo.
MAX_SECONDS = 7 * 86_400.0
#: Token ids travel as 32-bit integers in every server we talk to.
MAX_VOCAB_SIZE = 2**31 - 1
#: KV blocks of a pool model (the oracle's, the embedded engine's): about 100 bytes each.
MAX_POOL_BLOCKS = 10**7
#: Tokens of one prompt, sequence or step: far beyond any model's context, short of a typo.
MAX_TOKENS = 10**8
#: Tokens in one KV block (vLLM's largest is 256; leave room, refuse typos).
MAX_BLOCK_SIZE = 65_536

#: Requests a second: a finite rate beyond a billion a second is every request at t=0.
MAX_RATE = 1e9
RATE_REASON = "for every request at t=0, use inf"
#: Tenants or LoRA adapters given as a count: each is a name held in memory.
MAX_NAMES = 100_000

PLAN_REASON = "plans are built in memory before the run; split a larger run into several"


@dataclass(frozen=True)
class Bound:
    """What a number may be: ``low`` (exclusive when ``above``), ``high``, and whether
    infinity means something (``inf``). ``why`` explains the cap in the message."""

    low: float | None = None
    high: float | None = None
    above: bool = False
    inf: bool = False
    why: str = ""
    whole: bool = False

    def check(self, field: str, value: float | int | None) -> float | int | None:
        """``value`` if allowed (``None`` passes: unset), else an ``InputError`` for ``field``."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(field, f"expected a number, got {value!r}")
        if math.isnan(value):
            raise InputError(field, "NaN is not allowed", self.expects())
        if math.isinf(value) and not (self.inf and value > 0):
            raise InputError(field, f"{value} is not allowed", self.expects())
        if math.isinf(value):
            return value
        if self.whole and value != int(value):
            raise InputError(field, f"expected a whole number, got {value!r}", self.expects())
        if self.low is not None and (value < self.low or (self.above and value == self.low)):
            raise InputError(field, f"{_show(value)} is too small", self.expects())
        if self.high is not None and value > self.high:
            reason = f": {self.why}" if self.why else ""
            raise InputError(
                field, f"{_show(value)} is above the cap of {_show(self.high)}{reason}"
            )
        return value

    def expects(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.above else '>='} {_show(self.low)}")
        if self.high is not None:
            parts.append(f"<= {_show(self.high)}")
        text = "must be " + " and ".join(parts) if parts else "must be a finite number"
        return text + (", or inf" if self.inf else "")


def _show(value: float | int) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def check_plan_size(requests: float, what: str, field: str = "num_requests") -> None:
    """Refuse a plan of more than ``MAX_PLAN_REQUESTS`` requests before building it."""
    if not requests <= MAX_PLAN_REQUESTS:  # also catches NaN and inf
        if math.isnan(requests):
            raise InputError(field, f"{what} asks for NaN requests", "give a finite count")
        shown = "unbounded" if math.isinf(requests) else f"about {_show(math.ceil(requests))}"
        raise InputError(
            field,
            f"{what} asks for {shown} requests, above the cap of {_show(MAX_PLAN_REQUESTS)}",
            PLAN_REASON,
        )


#: Every seed flag (``--seed``): numpy seeds are non-negative 64-bit integers.
SEED_BOUND = Bound(0, 2**63 - 1, whole=True)
#: Bootstrap resamples (``--resamples``): each is a pass over the data, held in memory.
RESAMPLES_BOUND = Bound(100, 10**6, whole=True, why="each resample is a pass held in memory")
#: An interval's confidence level (``--confidence``), below 1 (``check_confidence``).
CONFIDENCE_BOUND = Bound(0.5, 1)


def check_confidence(field: str, value: float) -> float:
    """``value`` as a confidence level in [0.5, 1), else an ``InputError`` for ``field``."""
    CONFIDENCE_BOUND.check(field, value)
    if value >= 1:
        raise InputError(field, f"{value:g} is not below 1", "e.g. 0.95")
    return value
