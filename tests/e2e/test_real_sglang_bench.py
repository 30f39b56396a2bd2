"""``prefillscope bench`` against the real SGLang CPU target, with no flag the server can
answer: its radix oracle against SGLang's own ``cached_tokens``, request by request.

Three shapes, each sent by one closed-loop user after a cache flush (``--cache-protocol
reset``: SGLang's ``/flush_cache``), so that each request finds in the radix tree exactly
what the requests before it left there, as the sequential oracle assumes:

* **shared-prefix**: four system prompts of 300–1200 tokens, a unique suffix each;
* **multi-turn**: three sessions of three turns, each turn's prompt the last turn's prompt,
  SGLang's answer and a new message (the oracle runs after the run, over what SGLang
  answered);
* **doc-qa**: a few long documents, several questions on each, Zipf-skewed.

SGLang's cache matches token by token (``--page-size 1``), so the oracle at SGLang's own
geometry (read from ``sglang:page_size``) must equal SGLang's ``cached_tokens`` for every
request. No ``--vocab-size``: the vocabulary, the context length and the model come from
SGLang's endpoints, and ``run.json`` ``target.discovered`` says which. Each test prints
its per-request table (``-rP`` shows it in CI's log).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from bench_support import bench_cli, read_json, requests_table
from real_sglang import MAX_MODEL_LEN, MODEL, MODEL_DIR, PAGE_SIZE, VOCAB_SIZE

#: The module's runs are made in one fixture, under its first test's time limit: three
#: benches of 10–12 requests, minutes on a 2-core machine.
pytestmark = [pytest.mark.real_sglang, pytest.mark.slow, pytest.mark.timeout(1800)]

SHAPES: dict[str, list[str]] = {
    "shared-prefix": [
        "--workload", "system-prompt", "--num-requests", "12", "--concurrency", "1",
        "--seed", "3", "--set", "prefix_len=uniform:300-1200", "--set", "output_len=8",
    ],
    "multi-turn": [
        "--workload", "multi-turn", "--num-requests", "9", "--concurrency", "1", "--seed", "5",
        "--set", "sessions=3", "--set", "turns=3", "--set", "first_len=300",
        "--set", "user_len=64", "--set", "output_len=8", "--set", "think_time=0",
    ],
    "doc-qa": [
        "--workload", "doc-qa", "--num-requests", "10", "--concurrency", "1", "--seed", "7",
        "--set", "groups=3", "--set", "prefix_len=uniform:800-1600",
        "--set", "output_len=8",
    ],
}  # fmt: skip


def bench_sglang(url: str, out: Path, workload: list[str]) -> tuple[dict[str, Any], pd.DataFrame]:
    """``prefillscope bench --endpoint URL … --json``, zero-flag as to the server."""
    done = bench_cli(
        "--endpoint", url, *workload, "--cache-protocol", "reset",
        "--metrics-interval", "0.2", "--gpu-telemetry", "off", "--out", str(out), "--json",
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), requests_table(out)


@pytest.fixture(scope="module")
def runs(sglang_url: str, tmp_path_factory: pytest.TempPathFactory):
    """Each shape's run: {shape: (run dir, summary, requests)}."""
    done = {}
    for shape, workload in SHAPES.items():
        out = tmp_path_factory.mktemp(shape) / "run"
        done[shape] = (out, *bench_sglang(sglang_url, out, workload))
    return done


def table(shape: str, requests: pd.DataFrame) -> str:
    rows = requests.sort_values("id")[
        ["id", "session", "turn", "prompt_tokens", "expected_cached_tokens", "cached_tokens"]
    ]
    rows = rows.rename(columns={"expected_cached_tokens": "oracle", "cached_tokens": "sglang"})
    return f"\n{shape}: oracle vs SGLang cached_tokens, per request\n{rows.to_string(index=False)}"


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_radix_oracle_equals_sglangs_cached_tokens_request_by_request(runs, shape) -> None:
    run, summary, requests = runs[shape]
    print(table(shape, requests))
    oracle = read_json(run, "run.json")["oracle"]
    assert oracle["source"] == "server metrics" and oracle["block_size"] == PAGE_SIZE
    assert (requests["status"] == "ok").all(), requests[["id", "status", "error_message"]]
    assert requests["cached_tokens"].notna().all()
    same = requests["cached_tokens"] == requests["expected_cached_tokens"]
    print(f"{shape}: {int(same.sum())}/{len(requests)} requests equal")
    assert same.all(), requests[~same][["id", "cached_tokens", "expected_cached_tokens"]]
    assert requests["cached_tokens"].sum() > 0  # the shape shares prefixes: some hit
    server = summary["server"]["prefix"]
    observed, expected = server["observed_hit_rate"], server["expected_hit_rate"]
    print(
        f"{shape}: hit rate oracle {expected['value']:.4f}, server counters {observed['value']:.4f}"
    )
    assert observed["value"] == pytest.approx(expected["value"], abs=0.01)


def test_the_run_needed_no_flag_the_server_answers(runs) -> None:
    run, _, _ = runs["shared-prefix"]
    target = read_json(run, "run.json")["target"]
    assert target["flavour"] == "sglang" and target["model"] == MODEL
    assert target["vocab_size"] == VOCAB_SIZE and target["max_model_len"] == MAX_MODEL_LEN
    discovered = target["discovered"]
    print(f"\ntarget.discovered: {json.dumps(discovered, indent=1)}")
    assert discovered["model"] == "/v1/models data[0].id"
    assert discovered["max_model_len"] == "/v1/models max_model_len"
    assert discovered["vocab_size"].startswith("/v1/detokenize")
    assert discovered["model_path"] == "/get_model_info model_path"
    info = target["server_info"]
    assert Path(info["model_path"]) == MODEL_DIR
    assert info["version"] == "0.5.23" and info["chunk_budget"] == 512
    assert "--chunked-prefill-size" in info["command"]


def test_the_server_section_has_no_unknown_where_sglang_counts_zero(runs) -> None:
    _, summary, _ = runs["shared-prefix"]
    server = summary["server"]
    assert server["flavour"] == "sglang"
    # no retraction in a healthy run: SGLang has not created the counter, but its gauge
    # num_retracted_reqs is on the page
    preemptions = server["preemptions"]
    assert preemptions["provenance"] == "measured" and preemptions["value"] == 0, preemptions
