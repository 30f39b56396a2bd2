"""The end-of-run summary in a real terminal (tmux) at 80, 100, 120, 160 and 200
columns: no value cut ("…"), no label wrapped onto a second line, nothing wider than the
terminal. Prints the layout chosen at each width."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from repo_paths import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

WIDTHS = (80, 100, 120, 160, 200)
RUN = (
    "--workload", "system-prompt", "--num-requests", "12", "--rate", "20",
    "--engine", "fixed_step_s=0.002", "--gpu-telemetry", "off", "--slo", "ttft=500,itl=50",
)  # fmt: skip
#: Labels of the latency rows, long and short forms.
LATENCY_LABEL = re.compile(r"^ ?(TTFT|ITL|TPOT|E2E|(srv|server) (TTFT|ITL|E2E))( \(| {2,})")
FIGURES = ("completed", "requests/s", "output tokens/s", "goodput (meets every SLO)")


def _pane(
    width: int, out: Path, timeout_s: float = 120.0, args: tuple[str, ...] = ("bench", *RUN)
) -> str:
    """The tmux pane (and its scrollback) once ``prefillscope ARGS`` has printed all."""
    socket = f"prefillscope-width-{os.getpid()}-{width}"
    command = " ".join(
        [
            "env -u COLUMNS -u LINES",
            sys.executable,
            "-c 'from prefillscope.cli import main; main()'",
            *args,
            *(("--out", str(out)) if args[0] == "bench" else ()),
            "; echo END-OF-OUTPUT; sleep 60",
        ]
    )
    tmux = ["tmux", "-L", socket]
    root = ROOT
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", str(width), "-y", "120", command], check=True, cwd=root
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            time.sleep(0.5)
            pane = subprocess.run(
                [*tmux, "capture-pane", "-p", "-S", "-300"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            if "END-OF-OUTPUT" in pane or time.monotonic() > deadline:
                return pane
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_end_of_run_summary_at_each_width(tmp_path: Path, width: int) -> None:
    pane = _pane(width, tmp_path / "run")
    lines = [line.rstrip() for line in pane.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("bench complete"))
    screen = lines[start:]
    assert any(line.startswith("next: ") for line in screen), pane
    assert "…" not in "\n".join(screen), pane  # nothing cut
    assert all(len(line) <= width for line in screen), pane
    # Every latency row holds its label and its last column (the count) on one line.
    rows = [line for line in screen if LATENCY_LABEL.match(line)]
    assert len(rows) >= 5, pane
    for row in rows:
        assert re.search(r"\d$", row), (row, pane)
    header = next(line for line in screen if line.lstrip().startswith("metric"))
    # No continuation lines between the latency rows (a wrapped label leaves one).
    first, last = screen.index(rows[0]), screen.index(rows[-1])
    assert all(LATENCY_LABEL.match(line) for line in screen[first : last + 1]), pane
    for label in FIGURES:
        line = next((line for line in screen if label in line), None)
        assert line is not None and re.search(rf"{re.escape(label)}\s+\S", line), (label, pane)
    columns = header.split()
    side = any(line.count("figure") >= 2 for line in screen)
    print(
        f"\nWIDTH {width}: latency columns {columns[1:]}, labels "
        f"{'short' if any(r.startswith(' TTFT (sent)') for r in rows) else 'full'}, "
        f"outcome and server {'side by side' if side else 'stacked'}"
    )


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bench_support import bench_cli

    out = tmp_path_factory.mktemp("report-widths") / "run"
    done = bench_cli(*RUN, "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_latency_table_at_each_width(finished_run: Path, width: int) -> None:
    pane = _pane(width, finished_run, args=("report", str(finished_run)))
    lines = [line.rstrip() for line in pane.splitlines()]
    end = next(i for i, line in enumerate(lines) if "END-OF-OUTPUT" in line)
    screen = [line for line in lines[:end] if "prefillscope.cli" not in line]
    assert all(len(line) <= width for line in screen), pane
    rows = [line for line in screen if LATENCY_LABEL.match(line)]
    assert len(rows) >= 5, pane
    first, last = screen.index(rows[0]), screen.index(rows[-1])
    assert all(LATENCY_LABEL.match(line) for line in screen[first : last + 1]), pane
    assert all(re.search(r"\d$", row) for row in rows), pane
    assert any("goodput (meets every SLO)" in line for line in screen), pane
