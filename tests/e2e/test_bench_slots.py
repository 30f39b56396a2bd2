"""``bench`` against ``prefillscope serve --cache-model slots:4``: the slot oracle per request.

The server names its cache model on /metrics, so the bench's oracle replays llama.cpp's
slots without being told (``run.json`` says which model and where it was read). Sent one
at a time, every request's ``cached_tokens`` equals the oracle's expectation; sent at a
rate that keeps all four slots busy at times, each request either agrees or carries the
oracle's reason (``oracle_note``) — and the block model the oracle used before gets
request after request wrong on the same server.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench_support import bench, read_json, requests_table

pytestmark = pytest.mark.slow  # three runs of 40 requests

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "serve"]
WORKLOAD = {
    "groups": 6,
    "prefix_len": 300,
    "suffix_len": 40,
    "output_len": 4,
    "num_requests": 40,
    "arrival": "constant",
    "rate": 25,
}


@pytest.fixture(scope="module")
def slots_server() -> Iterator[str]:
    flags = ["--port", "0", "--json", "--fixed-step-ms", "2", "--cache-model", "slots:4"]
    proc = subprocess.Popen(
        [*CLI, *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        info = json.loads(proc.stdout.readline())
        assert info["cache_model"] == "slots:4"
        yield info["url"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=10)


def _run(folder: Path, url: str, rate: float = 25, **fields):
    run = folder / "run"
    workload = WORKLOAD | {"rate": rate}
    outcome = bench("shared-prefix", run, endpoint=url, overrides=workload, **fields)
    assert outcome.status == "complete"
    requests = requests_table(run)
    assert (requests["status"] == "ok").all() and len(requests) == 40
    return read_json(run, "run.json")["oracle"], requests


def _notes(requests):
    if "oracle_note" not in requests:
        return requests["id"].map(lambda _: None)
    return requests["oracle_note"]


def test_one_at_a_time_the_slot_oracle_equals_cached_tokens(slots_server, tmp_path) -> None:
    oracle, requests = _run(tmp_path, slots_server, max_concurrency=1)
    assert oracle["cache_model"] == "slots:4" and oracle["cache_model_source"] == "server metrics"
    assert (requests["cached_tokens"] == requests["expected_cached_tokens"]).all()
    assert _notes(requests).isna().all()
    # Six system prompts, four slots: the host prompt cache brings evicted ones back.
    assert (requests["cached_tokens"] == 300).sum() >= 30


@pytest.mark.timing
def test_under_load_each_request_agrees_or_says_why(slots_server, tmp_path) -> None:
    _, requests = _run(tmp_path, slots_server, rate=80)
    agree = requests["cached_tokens"] == requests["expected_cached_tokens"]
    noted = _notes(requests).notna()
    assert (agree | noted).all(), requests.loc[~(agree | noted), ["id", "cached_tokens"]]
    assert agree.sum() >= 20


def test_the_block_model_gets_slots_wrong(slots_server, tmp_path) -> None:
    oracle, requests = _run(tmp_path, slots_server, max_concurrency=1, cache_model="blocks")
    assert oracle["cache_model"] == "blocks" and oracle["cache_model_source"] == "flags"
    # Block-granular: a 300-token prefix is 288 cached tokens to it, 300 to llama.cpp.
    wrong = requests["cached_tokens"] != requests["expected_cached_tokens"]
    assert wrong.sum() >= 30
