"""The command line sets OpenBLAS's idle spin before numpy loads, and keeps a user's own."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.native_threads import SHORTEST_SPIN, SPIN_SETTING, settle_blas_threads

ROOT = Path(__file__).resolve().parents[2]

#: Runs ``prefillscope bench --dry-run`` in-process and prints the spin setting as it
#: stood when numpy was first imported (OpenBLAS reads it then, and only then).
_AT_NUMPY_IMPORT = """
import importlib.abc, os, sys
seen = []
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" and not seen:
            seen.append(os.environ.get(%(setting)r))
        return None
sys.meta_path.insert(0, Watch())
sys.argv = ["prefillscope", "bench", "--workload", "random", "--num-requests", "2",
            "--dry-run", "--json"]
from prefillscope.cli import main
try:
    main()
except SystemExit:
    pass
print("SPIN", seen, file=sys.stderr)
"""


def _spin_at_numpy_import(env_value: str | None) -> list:
    env = {k: v for k, v in os.environ.items() if k != SPIN_SETTING}
    if env_value is not None:
        env[SPIN_SETTING] = env_value
    done = subprocess.run(
        [sys.executable, "-c", _AT_NUMPY_IMPORT % {"setting": SPIN_SETTING}],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = [x for x in done.stderr.splitlines() if x.startswith("SPIN ")]
    assert line, done.stderr
    return ast.literal_eval(line[-1].removeprefix("SPIN "))  # [str] or [None]


def test_the_command_sets_the_spin_before_numpy_loads() -> None:
    assert _spin_at_numpy_import(None) == [SHORTEST_SPIN]


def test_a_users_own_setting_is_kept() -> None:
    assert _spin_at_numpy_import("20") == ["20"]


def test_settle_only_fills_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SPIN_SETTING, raising=False)
    settle_blas_threads()
    assert os.environ[SPIN_SETTING] == SHORTEST_SPIN
    monkeypatch.setenv(SPIN_SETTING, "12")
    settle_blas_threads()
    assert os.environ[SPIN_SETTING] == "12"
