"""The clients ``peers.py`` sets side by side, each run as a command of its own.

Every client is a whole process tree started here and waited for, so its CPU is this
process's ``RUSAGE_CHILDREN`` growth over the command (workers and helper processes
included, since each parent waits for its own). Each streams ``requests`` requests of 16
prompt tokens and ``max_tokens`` output tokens from the SSE mock at ``streams`` in a
closed loop, and comes back as an ``Outcome``: its CPU and tokens, and either the times
it saw (per request its send and its reads, on ``perf_counter``, the mock's clock) or,
for a peer, only the TTFT and ITL its own result file reports.

* ``bare``: ``bare_reader.py``, the floor;
* ``w1`` / ``default``: ``prefillscope bench --workers 1`` and at its default workers,
  read back from the run's ``requests.parquet`` and ``chunks.parquet``;
* ``vllm``: ``vllm bench serve`` (``vllm_bench_serve.py``);
* ``guidellm``, ``aiperf``, ``inference-perf``: from their side venvs under
  ``~/.cache/prefillscope-peers`` (``peers_setup.sh``), with the local tokenizer.

A client that is not installed raises ``NotRun`` with the reason.
"""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from overhead_clients import VOCAB, bare_chunks, body, children_cpu
from vllm_bench_serve import INSTALL, vllm_bench_serve

from runfmt.tables import RunTables

HERE = Path(__file__).resolve().parent
PEERS = Path(os.environ.get("PREFILLSCOPE_PEERS", Path.home() / ".cache" / "prefillscope-peers"))
TOKENIZER = Path(os.environ.get("PREFILLSCOPE_VLLM_TOKENIZER", INSTALL / "models" / "tiny-llama"))
MODEL = "llama-3.1-8b"
PROMPT_LEN = 16


class NotRun(Exception):
    """The client cannot run here; the message says why."""


@dataclass
class Outcome:
    cpu_s: float
    tokens: int
    #: Per request id: its send time; and its reads (request_id, t_s, n_tokens).
    sent: pd.Series | None = None
    chunks: pd.DataFrame | None = None
    #: What its own result file says: ttft_mean_ms, ttft_p99_ms, itl_p99_ms.
    reported: dict = field(default_factory=dict)
    dispatch_lag_p99_ms: float | None = None
    #: Its client processes, where it says (prefillscope's run.json).
    workers: int | None = None


def command_cpu(command: list[str], log: Path, env: dict | None = None) -> float:
    """CPU seconds of a whole command run to completion; its output goes to ``log``."""
    before = children_cpu()
    with log.open("w") as out:
        env = os.environ | (env or {})
        done = subprocess.run(command, stdout=out, stderr=out, env=env, cwd=log.parent)
    cpu = children_cpu() - before
    if done.returncode:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        raise RuntimeError(f"{Path(command[0]).name} exited {done.returncode}: {tail[-300:]}")
    return cpu


def bare(url: str, streams: int, requests: int, max_tokens: int, tmp: Path) -> Outcome:
    bodies, out = tmp / "bodies.jsonl", tmp / "reads.marshal"
    bodies.write_text("\n".join(json.dumps(body(max_tokens, i)) for i in range(requests)))
    command = [sys.executable, str(HERE / "bare_reader.py"), url, str(bodies), str(streams)]
    command.append(str(out))
    cpu = command_cpu(command, tmp / "bare.log")
    reads = marshal.loads(out.read_bytes())
    chunks = bare_chunks(reads, max_tokens)
    sent = pd.Series([sent for sent, _, _ in reads])
    return Outcome(cpu, int(chunks["n_tokens"].sum()), sent, chunks)


def prefillscope(workers: int | None, open_loop: bool = False) -> Callable[..., Outcome]:
    """``prefillscope bench`` at ``workers`` (None: its default); ``open_loop``: the second
    argument of the run is an arrival rate (``--rate``, Poisson), not a stream count."""
    arrival = "--rate" if open_loop else "--concurrency"

    def run(url: str, streams: int, requests: int, max_tokens: int, tmp: Path) -> Outcome:
        run_dir = tmp / "run"
        command = [
            str(Path(sys.executable).parent / "prefillscope"), "bench", "--endpoint", url,
            "--workload", "random", "--num-requests", str(requests),
            arrival, str(streams), "--random-input-len", str(PROMPT_LEN),
            "--random-output-len", str(max_tokens), "--vocab-size", str(VOCAB),
            "--gpu-telemetry", "off", "--out", str(run_dir), "--no-diagnosis",
            *(["--workers", str(workers)] if workers else []),
        ]  # fmt: skip
        cpu = command_cpu(command, tmp / "bench.log")
        wall_to_perf = time.time() - time.perf_counter()
        info = json.loads((run_dir / "run.json").read_text())
        t0 = info["clock"]["wall_t0"] - wall_to_perf  # the run's t=0 on perf_counter
        tables = RunTables(run_dir)
        requests_table = tables.requests.set_index("id")
        chunks = tables.chunks
        chunks["t_s"] += t0
        lag = json.loads((run_dir / "summary.json").read_text())["client"]["dispatch_lag_p99_s"]
        return Outcome(
            cpu,
            int(requests_table["output_tokens"].sum()),
            requests_table["sent_s"] + t0,
            chunks,
            dispatch_lag_p99_ms=None if lag is None else lag * 1e3,
            workers=info["load"]["workers"],
        )

    return run


def vllm(url: str, streams: int, requests: int, max_tokens: int, tmp: Path) -> Outcome:
    figures = vllm_bench_serve(url, streams, requests, max_tokens)
    if figures is None:
        raise NotRun("no vLLM install (targets/vllm-cpu.sh) or no local tokenizer")
    tokens = figures["tokens"]
    cpu = figures["startup_cpu_s"] + figures["cpu_us_per_token"] * tokens / 1e6
    reported = {
        "ttft_mean_ms": figures["mean_ttft_ms"],
        "ttft_p99_ms": figures["p99_ttft_ms"],
        "itl_p99_ms": figures["p99_itl_ms"],
    }
    return Outcome(cpu, tokens, reported=reported)


def peer_bin(name: str, command: str) -> Path:
    path = PEERS / name / "venv" / "bin" / command
    if not path.exists():
        raise NotRun(f"not installed (bash benchmarks/peers_setup.sh {name})")
    if not (TOKENIZER / "tokenizer.json").exists():
        raise NotRun(f"no local tokenizer at {TOKENIZER}")
    return path


def guidellm(url: str, streams: int, requests: int, max_tokens: int, tmp: Path) -> Outcome:
    out = tmp / "guidellm.json"
    command = [
        str(peer_bin("guidellm", "guidellm")), "run",
        "--backend", f"kind=openai_http,target={url},request_format=/v1/completions,"
        f"model={MODEL},validate_backend=false",
        "--profile", f"kind=concurrent,streams={streams}",
        "--constraint", f"kind=max_requests,count={requests}",
        "--tokenizer", f"kind=huggingface_auto,model={TOKENIZER}",
        "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_LEN},output_tokens={max_tokens}",
        "--output", f"kind=json,path={out}", "--disable-console-interactive",
    ]  # fmt: skip
    cpu = command_cpu(command, tmp / "guidellm.log", {"HF_HUB_OFFLINE": "1"})
    metrics = json.loads(out.read_text())["benchmarks"][0]["metrics"]

    def ok(name: str) -> dict:
        return metrics[name]["successful"]

    reported = {
        "ttft_mean_ms": ok("time_to_first_token_ms")["mean"],
        "ttft_p99_ms": ok("time_to_first_token_ms")["percentiles"]["p99"],
        "itl_p99_ms": ok("inter_token_latency_ms")["percentiles"]["p99"],
    }
    return Outcome(cpu, int(ok("output_token_count")["total_sum"]), reported=reported)


def aiperf(url: str, streams: int, requests: int, max_tokens: int, tmp: Path) -> Outcome:
    """aiperf with the server's token counts (no tokenizing of the answers). Not offline
    mode: with ``HF_HUB_OFFLINE`` it looks a local tokenizer up as a hub cache entry."""
    art = tmp / "aiperf"
    command = [
        str(peer_bin("aiperf", "aiperf")), "profile", "--model", MODEL, "--url", url,
        "--endpoint-type", "completions", "--streaming", "--tokenizer", str(TOKENIZER),
        "--concurrency", str(streams), "--request-count", str(requests),
        "--isl", str(PROMPT_LEN), "--osl", str(max_tokens),
        "--extra-inputs", f"max_tokens:{max_tokens}", "--extra-inputs", "ignore_eos:true",
        "--use-server-token-count", "--no-server-metrics", "--no-gpu-telemetry",
        "--ui", "simple", "--artifact-dir", str(art),
    ]  # fmt: skip
    cpu = command_cpu(command, tmp / "aiperf.log")
    result = json.loads((art / "profile_export_aiperf.json").read_text())
    reported = {
        "ttft_mean_ms": result["time_to_first_token"]["avg"],
        "ttft_p99_ms": result["time_to_first_token"]["p99"],
        "itl_p99_ms": result["inter_token_latency"]["p99"],
    }
    return Outcome(cpu, int(result["output_token_count"]["sum"]), reported=reported)


def inference_perf(url: str, streams: int, requests: int, max_tokens: int, tmp: Path) -> Outcome:
    fixed = {"min": PROMPT_LEN, "max": PROMPT_LEN, "mean": PROMPT_LEN, "std_dev": 0}
    out_len = {"min": max_tokens, "max": max_tokens, "mean": max_tokens, "std_dev": 0}
    config = {
        "api": {"type": "completion", "streaming": True},
        "data": {
            "type": "random",
            "input_distribution": fixed | {"total_count": requests},
            "output_distribution": out_len | {"total_count": requests},
        },
        "load": {
            "type": "concurrent",
            "stages": [{"num_requests": requests, "concurrency_level": streams}],
            "worker_max_concurrency": streams,
        },
        "server": {"type": "vllm", "model_name": MODEL, "base_url": url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(TOKENIZER)},
        "storage": {"local_storage": {"path": str(tmp / "reports")}},
    }
    path = tmp / "config.json"  # YAML is a superset of JSON
    path.write_text(json.dumps(config))
    command = [str(peer_bin("inference-perf", "inference-perf")), "-c", str(path)]
    cpu = command_cpu(command, tmp / "inference-perf.log", {"HF_HUB_OFFLINE": "1"})
    summary = next((tmp / "reports").rglob("summary_lifecycle_metrics.json"), None)
    if summary is None:
        raise RuntimeError("inference-perf wrote no summary_lifecycle_metrics.json")
    success = json.loads(summary.read_text())["successes"]
    latency = success["latency"]
    reported = {
        "ttft_mean_ms": latency["time_to_first_token"]["mean"] * 1e3,
        "ttft_p99_ms": latency["time_to_first_token"]["p99"] * 1e3,
        "itl_p99_ms": latency["inter_token_latency"]["p99"] * 1e3,
    }
    tokens = success.get("output_len", {}).get("total") or success["count"] * max_tokens
    return Outcome(cpu, int(tokens), reported=reported)


#: Every client, by the name ``--clients`` takes, with the name the table shows.
#: ``prefillscope bench --workers 1`` at an arrival rate: streams that do not end together.
OPEN_LOOP = ("prefillscope bench --workers 1 --rate R", prefillscope(1, open_loop=True))

CLIENTS: dict[str, tuple[str, Callable[..., Outcome]]] = {
    "bare": ("bare reader (aiohttp + uvloop)", bare),
    "w1": ("prefillscope bench --workers 1", prefillscope(1)),
    "default": ("prefillscope bench", prefillscope(None)),
    "vllm": ("vllm bench serve", vllm),
    "guidellm": ("guidellm", guidellm),
    "aiperf": ("aiperf", aiperf),
    "inference-perf": ("inference-perf", inference_perf),
}


def fixed_bare_cpu(url: str, tmp: Path, requests: int = 16, max_tokens: int = 8) -> float:
    """The bare reader's whole command for ``requests`` small requests (as ``bench 16``)."""
    return bare(url, requests, requests, max_tokens, tmp).cpu_s
