"""How long numpy's BLAS threads spin when they have nothing to do.

numpy's wheels carry OpenBLAS, which starts one thread per core when numpy is imported.
An OpenBLAS thread without work spins for ``2**THREAD_TIMEOUT`` CPU cycles before it
sleeps (28 by default: ~0.1 s at 2.5 GHz), after start-up and after every BLAS call.
Nothing on a run's path calls BLAS, so every process that imports numpy (the command,
each worker process, ``serve``) paid ~0.1 CPU-second of spinning for nothing:
measured on a 2-core machine, importing numpy, aiohttp and pandas took 0.64-0.74
CPU-seconds with the default and 0.47-0.55 with a 16-cycle spin.

``OPENBLAS_THREAD_TIMEOUT`` is OpenBLAS's own setting for that spin (4 to 30, the
exponent). Unlike one BLAS thread, it keeps every thread for the matrix products that
need them (the bootstrap's ``weights @ features`` in ``diagnose``); an idle thread merely
sleeps sooner and is woken by the next call. OpenBLAS reads it once, when it loads, so it
is set before numpy is imported, and child processes inherit it. A value the user set is
kept.
"""

from __future__ import annotations

import os

#: OpenBLAS's environment variable: the spin's length is 2 to this power, in cycles.
SPIN_SETTING = "OPENBLAS_THREAD_TIMEOUT"
#: The shortest spin OpenBLAS accepts.
SHORTEST_SPIN = "4"


def settle_blas_threads() -> None:
    """Ask OpenBLAS (loaded later, with numpy) for the shortest spin, unless the user
    chose one."""
    os.environ.setdefault(SPIN_SETTING, SHORTEST_SPIN)
