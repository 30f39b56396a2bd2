"""``vllm bench serve`` on the same mock as ``loadgen_overhead.py``, when vLLM is installed.

Its start-up (importing vLLM and torch, loading the tokenizer, building the prompts) is
~10-14 CPU-seconds, so it runs once, at one stream count. The start-up is its process's
CPU (``/proc/PID/stat``) at the moment it says ``Starting main benchmark run``; CPU per
token is the rest over the streamed tokens. Its own TTFT and ITL figures come from the
result file it saves.

Where vLLM lives: ``PREFILLSCOPE_VLLM_CLI`` (its ``vllm`` CLI; default the CPU install
under ``~/.cache/prefillscope-targets/vllm/venv/bin``, whose ``vllm-cpu-cli`` shim is
preferred) and ``PREFILLSCOPE_VLLM_TOKENIZER`` (a local tokenizer directory, since
nothing is downloaded; default ``models/tiny-llama`` beside that venv). Absent either:
``None``, and the caller prints that it was skipped.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import tempfile
from pathlib import Path

INSTALL = Path.home() / ".cache" / "prefillscope-targets" / "vllm"
#: The line ``vllm bench serve`` prints once its start-up is over.
MAIN_RUN_LINE = "Starting main benchmark run"


def vllm_install() -> tuple[Path, Path] | None:
    """(the ``vllm`` CLI, a tokenizer directory), or None when either is missing."""
    bin_dir = INSTALL / "venv" / "bin"
    default_cli = next(
        (p for p in (bin_dir / "vllm-cpu-cli", bin_dir / "vllm") if p.exists()), bin_dir / "vllm"
    )
    cli = Path(os.environ.get("PREFILLSCOPE_VLLM_CLI", default_cli))
    tokenizer = Path(
        os.environ.get("PREFILLSCOPE_VLLM_TOKENIZER", INSTALL / "models" / "tiny-llama")
    )
    if not cli.exists() or not (tokenizer / "tokenizer.json").exists():
        return None
    return cli, tokenizer


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def vllm_bench_serve(url: str, streams: int, requests: int, max_tokens: int) -> dict | None:
    """Figures of one closed-loop ``vllm bench serve`` run, or None when vLLM is absent."""
    install = vllm_install()
    if install is None:
        return None
    cli, tokenizer = install
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            str(cli), "bench", "serve", "--backend", "openai", "--base-url", url,
            "--endpoint", "/v1/completions", "--model", "llama-3.1-8b",
            "--tokenizer", str(tokenizer), "--dataset-name", "random",
            "--num-prompts", str(requests), "--max-concurrency", str(streams),
            "--random-input-len", "16", "--random-output-len", str(max_tokens),
            "--ignore-eos", "--seed", "0", "--disable-tqdm",
            "--save-result", "--result-dir", tmp, "--result-filename", "result.json",
        ]  # fmt: skip
        before = _children_cpu()
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=os.environ | {"PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None
        startup: float | None = None
        for line in proc.stdout:
            if startup is None and MAIN_RUN_LINE in line:
                startup = _process_cpu(proc.pid)
        if proc.wait() != 0 or startup is None:
            raise RuntimeError(f"vllm bench serve failed (exit {proc.returncode})")
        total = _children_cpu() - before
        result = json.loads((Path(tmp) / "result.json").read_text())
    tokens = result["total_output_tokens"]
    return {
        "startup_cpu_s": startup,
        "cpu_us_per_token": (total - startup) / tokens * 1e6,
        "tokens": tokens,
        "failed": result["failed"],
        "mean_ttft_ms": result["mean_ttft_ms"],
        "p99_ttft_ms": result["p99_ttft_ms"],
        "mean_itl_ms": result["mean_itl_ms"],
        "p99_itl_ms": result["p99_itl_ms"],
    }
