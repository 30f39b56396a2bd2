"""``prefillscope compare`` through the real entry point, in-process, for the compare tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from prefillscope.cli import main


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys, *args: str | Path) -> tuple[int, str, str]:
    """``compare ARGS…`` (1000 resamples): exit status, stdout, stderr."""
    argv = ["prefillscope", "compare", "--resamples", "1000", *map(str, args)]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main()
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err
