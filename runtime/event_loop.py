"""The event loop a load-generating process runs: uvloop where it is installed.

uvloop (libuv underneath) runs the same asyncio program with less CPU per callback, and
the load generator's hot path is callbacks: a socket read, a protocol's
``data_received``, a waiter woken, a task stepped. Measured with
``benchmarks/loadgen_overhead.py``'s engine (256 streams of 100 tokens, client pinned to
one core of the busy 2-core development machine, three rounds each): the load
generator's CPU per streamed token 33.4 → 29.6 µs, the bare aiohttp reader's 26.3 →
22.4 µs, with the client's own ITL error (its gap against the other streams' gap over
the same engine steps) no worse. Where uvloop is not installed (it does not build on
Windows) the default asyncio loop runs the same code; ``PREFILLSCOPE_EVENT_LOOP=asyncio``
asks for it anywhere.

uvloop has no Python-level selector, so ``loadgen.arrivals`` stamps each read when its
bytes reach the protocol (``data_received``) rather than when the poll returned.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: Environment variable naming the loop: ``uvloop`` (the default, when installed) or
#: ``asyncio``.
LOOP_ENV = "PREFILLSCOPE_EVENT_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop constructor, or None for asyncio's default loop."""
    if os.environ.get(LOOP_ENV, "uvloop") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop ``loop_factory`` gives."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
