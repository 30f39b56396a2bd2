"""The collector's policy (``runtime.collector``): paused around a bench command's imports,
planning and summary; on, over only what is new, while the load runs.

The bench test runs a whole command in a fresh interpreter with a ``gc.callbacks`` hook
that notes every collection made while the ``bench`` command's function is on the stack,
and whether the load's frozen heap was in place (``gc.get_freeze_count() > 0``). Before
the policy, such a command made ~260 collections outside its load (one a full one).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

from runtime.collector import frozen_heap, paused

#: A bench command with a gc hook: collections inside ``bench`` (outside and inside its load).
HOOKED_BENCH = """
import gc, json, sys
from prefillscope.commands import bench as command

def in_bench():
    frame = sys._getframe(0)
    while frame is not None:
        if frame.f_code is command.bench.__code__:
            return True
        frame = frame.f_back
    return False

seen = {"outside_load": [], "inside_load": []}

def hook(phase, info):
    if phase == "start" and in_bench():
        key = "inside_load" if gc.get_freeze_count() else "outside_load"
        seen[key].append(info["generation"])

gc.callbacks.append(hook)
from prefillscope.cli import main
sys.argv = ["prefillscope", "bench", "--workload", "random", "--num-requests", "6",
            "--rate", "20", "--random-input-len", "16", "--random-output-len", "8",
            "--gpu-telemetry", "off", "--json", "--out", sys.argv[1]]
try:
    main()
except SystemExit as exc:
    seen["exit"] = exc.code
print(json.dumps(seen), file=sys.stderr)
"""


def test_paused_holds_collection_off_restores_it_and_freezes_what_it_left() -> None:
    assert gc.isenabled()
    try:
        with paused():
            assert not gc.isenabled()
            with paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # an inner pause does not end the outer one
            survivor = [[i] for i in range(1000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(survivor)  # what it left is not walked again
    finally:
        gc.unfreeze()


def test_frozen_heap_collects_only_what_is_new_then_restores() -> None:
    old = [[i] for i in range(1000)]  # tracked objects from before the load
    gc.disable()
    try:
        with frozen_heap():
            assert gc.isenabled()  # a load collects its own garbage
            assert gc.get_freeze_count() >= len(old)  # ... but never walks the older heap
        assert gc.get_freeze_count() == 0
        assert not gc.isenabled()  # back to the state it ran in
    finally:
        gc.enable()


def test_a_bench_command_collects_only_during_its_load(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", HOOKED_BENCH, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    seen = json.loads(done.stderr.strip().splitlines()[-1])
    assert seen["exit"] == 0, done.stderr[-2000:]
    assert seen["outside_load"] == []  # imports, planning, tables, summary: none
    assert (tmp_path / "run" / "summary.json").exists()
