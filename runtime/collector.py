"""When a command's cyclic garbage collector runs: never over what was built before a load,
not during the bursts of imports and table work around one.

Two facts about CPython's collector decide it:

* A collection traverses every tracked object of the generations it collects. Once a
  plan's objects (prompts, specs, the oracle's pool) reach the oldest generation, each
  full collection walks them all: a pause of milliseconds on the load generator's event
  loop (15 ms seen with a 200-request plan) in which no token is timed and no request
  goes out. ``frozen_heap`` moves everything that exists when the load starts out of
  the collector's sight (``gc.freeze``) for the load, with collection on.
* Importing a library allocates tens of thousands of objects that live as long as the
  process and make no garbage, yet each passes through the young generations and every
  full collection walks them again. Importing aiohttp, numpy, pandas, pyarrow.parquet
  and rich took a median 0.61 CPU-s with collection on and 0.48 with it paused (eight
  interleaved fresh interpreters each, on a 2-core machine), on a 16-request bench
  whose whole command costs ~1 CPU-s. ``paused`` holds collection off for such a stretch
  — a command's start-up and the end of its run — and restores it after; a load inside
  it still collects (``frozen_heap`` turns collection on for the load).

What is not collected while paused is reference cycles, which imports, argument parsing
and summaries hardly make; plain garbage is still freed by reference counting.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection inside; the collector's previous state after, with what the
    pause left alive frozen (modules, a command's settings: they live as long as the
    process), so the next collection does not walk it all at once."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Collection on, over only what is allocated inside: everything older is frozen out
    of it (see the module docstring); the collector's previous state after."""
    enabled = gc.isenabled()
    gc.freeze()
    gc.enable()
    try:
        yield
    finally:
        gc.unfreeze()
        if not enabled:
            gc.disable()
