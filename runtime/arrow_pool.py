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
"""

from __future__ import annotations

import os

#: pyarrow's environment variable naming its default memory pool.
POOL_SETTING = "ARROW_DEFAULT_MEMORY_POOL"
#: The C library's allocator.
SYSTEM_POOL = "system"


def settle_arrow_pool() -> None:
    """Ask pyarrow (loaded later) for the system allocator, unless the user chose one."""
    os.environ.setdefault(POOL_SETTING, SYSTEM_POOL)
