"""The HTML report fits a 1280-pixel window: headless Chromium lays the page out and the
page's scroll width must not exceed the window, even when the diagnosis holds long
unbroken text (a path, a metric expression). Skipped where Chromium is not installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from bench_support import bench_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

WINDOW = 1280
#: Text with no break opportunity, as a long path or a metric expression can be.
UNBROKEN = "Δvllm:prefix_cache_hits_total/" * 12


def scroll_width(page: Path, tmp_path: Path) -> int:
    """The page's ``scrollWidth`` in a ``WINDOW``-pixel headless Chromium (a copy of the
    page with one line of script that writes it into the title)."""
    probe = tmp_path / "probe.html"
    script = "<script>document.title='SW='+document.documentElement.scrollWidth</script>"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", script + "</body>"))
    done = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--window-size={WINDOW},900",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r"<title>SW=(\d+)</title>", done.stdout)
    assert found, done.stderr[-2000:]
    return int(found.group(1))


def test_the_report_with_a_long_diagnosis_fits_1280_pixels(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = bench_cli(
        "--workload", "system-prompt", "--num-requests", "8", "--rate", "20",
        "--engine", "fixed_step_s=0.002", "--gpu-telemetry", "off", "--out", str(run),
        "--slo", "ttft=500",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cli = [*done.args[:3]]
    assert subprocess.run([*cli, "diagnose", str(run)], capture_output=True).returncode in (0, 1)
    diagnosis = json.loads((run / "diagnosis.json").read_text())
    for finding in diagnosis["hypotheses"]:
        finding["next"] = f"{finding.get('next') or ''} {UNBROKEN}"
        finding["summary"] = f"{finding.get('summary') or ''} {UNBROKEN}"
    (run / "diagnosis.json").write_text(json.dumps(diagnosis))
    page = tmp_path / "report.html"
    made = subprocess.run([*cli, "report", str(run), "--html", str(page)], capture_output=True)
    assert made.returncode == 0, made.stderr
    assert UNBROKEN[:40] in page.read_text(encoding="utf-8")
    assert scroll_width(page, tmp_path) <= WINDOW
