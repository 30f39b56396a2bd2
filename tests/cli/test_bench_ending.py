"""``bench`` ends with the diagnosis headline when something is supported (issue 41 item
6): a planted prefill stall names H1 as the last line, and ``diagnosis.json`` is saved."""

from __future__ import annotations

import json
from pathlib import Path

from bench_support import bench_cli


def test_a_supported_cause_is_the_last_line_of_bench(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = bench_cli(
        "--workload", "interference", "--num-requests", "3", "--rate", "2", "--concurrency",
        "4", "--seed", "3", "--set", "stream_requests=1", "--set", "stream_output_len=200",
        "--set", "long_prompt_len=8192", "--engine", "max_num_batched_tokens=8192",
        "--gpu-telemetry", "off", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    diagnosis = json.loads((out / "diagnosis.json").read_text())
    assert diagnosis["primary"]["finding"] == "H1"
    text = " ".join(done.stdout.split())
    tail = text[text.index("next: ") :]
    assert "diagnosis: H1 Prefill chunks starving decodes: supported" in tail
    assert tail.rstrip().endswith(diagnosis["primary"]["why"].split()[-1])
