"""``prefillscope diagnose`` of a run on the real SGLang CPU target, the commands it
proposes tried as printed, and the chunk-size A/B it proposes run as printed.

The run is small (six requests sharing system prompts, one user), so that the A/B it
proposes — ``diagnose ab --chunks C/2,C`` over the same workload, each arm's server
started from SGLang's own command line with ``--chunked-prefill-size`` at the arm's size
(``--launch``; three trials an arm, one warm-up per launched server) — fits CI.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from bench_support import bench_cli
from next_commands import CLI, commands, dry_run, program
from real_sglang import CHUNK, MODEL_DIR

pytestmark = [pytest.mark.real_sglang, pytest.mark.slow, pytest.mark.timeout(900)]

WORKLOAD = [
    "--workload", "system-prompt", "--num-requests", "6", "--concurrency", "1", "--seed", "11",
    "--set", "prefix_len=uniform:200-600", "--set", "output_len=8",
]  # fmt: skip


@pytest.fixture(scope="module")
def diagnosed(sglang_url: str, tmp_path_factory: pytest.TempPathFactory):
    """(run dir, diagnosis.json) of a small run."""
    run = tmp_path_factory.mktemp("diagnose") / "run"
    done = bench_cli(
        "--endpoint", sglang_url, *WORKLOAD, "--cache-protocol", "reset",
        "--gpu-telemetry", "off", "--out", str(run), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    shown = subprocess.run(
        [*CLI, "diagnose", str(run)], capture_output=True, text=True, timeout=300, check=False
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    print(shown.stdout)
    return run, json.loads((run / "diagnosis.json").read_text())


def test_diagnose_reads_an_sglang_run(diagnosed) -> None:
    _, diagnosis = diagnosed
    by_id = {h["id"]: h for h in diagnosis["hypotheses"]}
    assert {"H1", "H4", "H5"} <= set(by_id)
    assert by_id["H5"]["status"] == "not applicable"  # a monolithic server: no transfers
    # preemptions are SGLang's zero (its gauge is on the page), not unknown
    assert by_id["H4"]["status"] != "inconclusive", by_id["H4"]


def test_every_command_diagnose_proposes_runs_as_printed(diagnosed, tmp_path: Path) -> None:
    _, diagnosis = diagnosed
    tried = []
    for hypothesis in diagnosis["hypotheses"]:
        for words in commands(hypothesis.get("next") or ""):
            tried.append((hypothesis["id"], words[1], dry_run(words, tmp_path)))
    for row in tried:
        print(*row)
    kinds = {kind for _, kind, _ in tried}
    assert {"bench", "diagnose", "simulate"} <= kinds, tried


@pytest.mark.timeout(1500)
def test_the_proposed_chunk_size_ab_runs_as_printed(diagnosed, tmp_path: Path) -> None:
    _, diagnosis = diagnosed
    h1 = next(h for h in diagnosis["hypotheses"] if h["id"] == "H1")
    (words,) = [w for w in commands(h1["next"]) if w[1:3] == ["diagnose", "ab"]]
    whole = shlex.split(words[words.index("--launch") + 1])
    launch = program(whole)
    # with the settings it ran with: the CPU engine and the sgl_kernel stand-in's path
    assert "SGLANG_USE_CPU_ENGINE=1" in whole
    assert any(w.startswith("PYTHONPATH=") and "sgl_kernel_standin" in w for w in whole)
    # the server as it was started: the installed interpreter, the model's path, the
    # run's budget against half of it
    assert launch[:3] == [launch[0], "-m", "sglang.launch_server"] and Path(launch[0]).is_file()
    assert launch[launch.index("--model-path") + 1] == str(MODEL_DIR)
    assert words[words.index("--chunks") + 1] == f"{CHUNK // 2},{CHUNK}"
    started = time.monotonic()
    done = subprocess.run(
        [*CLI, *words[1:], "--out", str(tmp_path / "ab"), "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=1400, check=False,
    )  # fmt: skip
    print(
        f"\ndiagnose ab as printed: exit {done.returncode} after {time.monotonic() - started:.0f} s"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ab = json.loads(done.stdout)
    print(json.dumps(ab["verdict"], indent=1))
    arms = ab["arms"]
    assert len(arms) == 2
    assert ab["verdict"]["outcome"]
