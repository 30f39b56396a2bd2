"""``--help`` at 80 columns never cuts a flag's name (issue 41 item 6: bench's
``--num-requests,--num-prompts`` showed as ``--num-requests,--num-pr…``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from prefillscope.commands import COMMANDS

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()"]
#: An option row of typer's help panel: the box edge, a required mark, a flag's name.
NAME_CELL = re.compile(r"^│ [ *]*(-[^ ]*)")


@pytest.mark.parametrize("command", [*COMMANDS, "diagnose ab"])
def test_every_flag_name_is_whole_at_80_columns(command: str) -> None:
    done = subprocess.run(
        [*CLI, *command.split(), "--help"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    names = [m.group(1) for line in lines if (m := NAME_CELL.match(line))]
    assert names, done.stdout
    assert not any(name.endswith("…") for name in names), done.stdout
    if command == "bench":  # an alias goes on its own line, both whole
        at = next(i for i, line in enumerate(lines) if "--num-requests," in line)
        assert "--num-prompts" in lines[at + 1]
