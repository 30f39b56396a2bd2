"""Which allocator pyarrow's buffers come from in a command's process.

pyarrow's default memory pool (mimalloc in its Linux wheels) keeps the pages of freed
buffers for reuse. A run's end converts its tables a part at a time (the compaction to
parquet, the summary's reads): each part's buffers are freed before the next, yet with
mimalloc the process's resident memory rose with the number of parts. Compacting a
50,000-request run directory alone: peak RSS 135 MiB with mimalloc, 105 with jemalloc,
102 with the system allocator (``malloc``, whose freed blocks the next part reuses); in a
whole bench of 50,000 requests the compaction added 105 MiB to the RSS with mimalloc.

``ARROW_DEFAULT_MEMORY_POOL`` is pyarrow's own setting, read once when it loads, so it is
set before anything imports pyarrow; child processes inherit it. A value the user set is
kept.

**glibc's thresholds held fixed.** ``malloc`` serves a block of 128 KiB or more with its
own ``mmap`` and gives it back when freed — until such a block is freed: glibc then raises
its threshold to that block's size (up to 32 MiB), so the next parts' column buffers come
from the heap, and the heap's freed middle is not given back. The resident memory of a
run's end then rose with the number of parts read, not with what any one part held: the
summary of a 50,000-request run 30 MiB above its start, of a 5,000-request run 8 MiB
(live Python and arrow memory: ~16 MiB in both). ``mallopt(M_MMAP_THRESHOLD, 128 KiB)``
keeps the threshold where it starts (it turns glibc's adjustment off): the summary of the
50,000-request run then peaks 18 MiB above its start, and a whole bench's end adds 62
MiB at 50,000 requests against 54 at 5,000 (88 against 58 before; ``benchmarks/soak.py``).
Where glibc is not the C library, or the user set ``MALLOC_MMAP_THRESHOLD_`` or
``MALLOC_TRIM_THRESHOLD_`` (glibc's own settings), nothing is changed.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: pyarrow's environment variable naming its default memory pool.
POOL_SETTING = "ARROW_DEFAULT_MEMORY_POOL"
#: The C library's allocator.
SYSTEM_POOL = "system"


#: glibc's ``mallopt`` parameter for the size from which a block is its own mapping.
M_MMAP_THRESHOLD = -3
#: glibc's starting threshold, held.
MMAP_THRESHOLD_BYTES = 128 * 1024
#: glibc's own environment settings: a user who set one chose the thresholds.
GLIBC_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def settle_arrow_pool() -> None:
    """Ask pyarrow (loaded later) for the system allocator, unless the user chose one,
    and hold glibc's ``mmap`` threshold where it starts (the module docstring)."""
    os.environ.setdefault(POOL_SETTING, SYSTEM_POOL)
    hold_mmap_threshold()


def hold_mmap_threshold() -> bool:
    """``mallopt(M_MMAP_THRESHOLD, 128 KiB)`` in this process, where the C library is
    glibc and the user left its settings alone; whether it was set."""
    if not sys.platform.startswith("linux") or any(os.environ.get(k) for k in GLIBC_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
