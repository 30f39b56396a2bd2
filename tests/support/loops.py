"""The event loops a test runs a client on: asyncio's, and uvloop's (the CLI's) where it is
installed."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: Names of the loops installed here, for ``pytest.mark.parametrize``.
LOOPS = ["asyncio"]
if importlib.util.find_spec("uvloop") is not None:
    LOOPS.append("uvloop")


def run_on(loop: str, main: Callable[[], Awaitable[T]]) -> T:
    """``main()`` run to its end on a new loop of the kind named."""
    factory = None
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())  # type: ignore[arg-type]
