"""The slot oracle against a real llama-server (``targets/llamacpp.sh``, 4 slots).

Skipped unless the target is installed (``bash targets/llamacpp.sh setup``); run with
``-m real_llamacpp``. A fresh server per run (its host prompt cache outlives slot
erasing), the bench's cache protocol ``reset``: then llama-server's own per-response
``timings.cache_n`` must equal the oracle's expectation for every request of a paced
system-prompt run with more system prompts than slots, or the request says why the oracle
cannot know — and the block model gets most requests wrong on the same server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from bench_support import bench, read_json, requests_table
from probe_servers import free_port
from repo_paths import TARGETS
from target_server import TARGETS_DIR

from runtime.lifetime import dying_with_us

pytestmark = pytest.mark.real_llamacpp

DIR = Path(os.environ.get("LLAMACPP_DIR") or TARGETS_DIR / "llamacpp")
WORKLOAD = {
    "groups": 6,
    "prefix_len": 600,
    "suffix_len": "uniform:20-80",
    "output_len": 16,
    "num_requests": 40,
    "rate": 2,
    "seed": 12,
}


@pytest.fixture
def llama_server(tmp_path: Path) -> Iterator[str]:
    if not (DIR / "build/bin/llama-server").exists():
        pytest.skip(f"llama.cpp target not installed in {DIR} (bash targets/llamacpp.sh setup)")
    port = free_port()
    log = (tmp_path / "llama-server.log").open("w")
    env = {**os.environ, "PORT": str(port), "NP": "4"}
    argv = dying_with_us(["bash", str(TARGETS / "llamacpp.sh"), "run"])
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / "llama-server.log").read_text()[-2000:]
            time.sleep(0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _run(tmp_path: Path, url: str, **fields):
    run = tmp_path / "run"
    outcome = bench(
        "system-prompt", run, endpoint=url, overrides=WORKLOAD, cache_protocol="reset",
        **fields,
    )  # fmt: skip
    assert outcome.status == "complete"
    requests = requests_table(run)
    ok = requests[requests["status"] == "ok"]
    assert len(ok) >= 38 and ok["cached_tokens"].notna().all()
    return read_json(run, "run.json")["oracle"], ok


def test_the_slot_oracle_equals_llama_servers_cached_tokens(tmp_path, llama_server) -> None:
    oracle, ok = _run(tmp_path, llama_server)
    assert oracle["cache_model"] == "slots:4"  # /props total_slots, not told
    agree = ok["cached_tokens"] == ok["expected_cached_tokens"]
    noted = ok["oracle_note"].notna() if "oracle_note" in ok else agree & False
    assert (agree | noted).all(), ok.loc[~(agree | noted), ["id", "cached_tokens"]]
    assert agree.mean() >= 0.9
    # Six system prompts on four slots: most requests still hit theirs (the host cache).
    assert (ok["cached_tokens"] >= 600).mean() > 0.6


def test_the_block_model_does_not_describe_llama_server(tmp_path, llama_server) -> None:
    oracle, ok = _run(tmp_path, llama_server, cache_model="blocks")
    assert oracle["cache_model"] == "blocks"
    assert (ok["cached_tokens"] != ok["expected_cached_tokens"]).mean() > 0.5
