"""A vLLM user's first runs against the real vLLM CPU target, with no --vocab-size and
no --model: what the server says is discovered, requests it must refuse are refused
before sending, and the chat API's expected cached tokens are the server's own."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from bench_support import bench_cli, requests_table
from oracle_races import AS_IT_HAPPENED, assert_cached_as_expected
from real_vllm import MAX_MODEL_LEN, MODEL, MODEL_DIR, VOCAB_SIZE

from probes.detect import detect_target
from workloads.tokenizer import ServerTokenizer, chat_messages

pytestmark = pytest.mark.real_vllm


def test_discovery_from_the_openai_base_url(vllm_url: str) -> None:
    target = asyncio.run(detect_target(vllm_url.removeprefix("http://") + "/v1"))
    assert (target.flavour, target.model) == ("vllm", MODEL)
    assert (target.vocab_size, target.max_model_len) == (VOCAB_SIZE, MAX_MODEL_LEN)
    assert target.base_url == vllm_url
    assert target.describe().paths["tokenize"] == "/tokenize"


def test_tokenize_with_messages_applies_the_chat_template(vllm_url: str) -> None:
    tok = ServerTokenizer(vllm_url, model=MODEL)
    try:
        chat = tok.encode_chat(chat_messages("hello"))
        plain = tok.encode("hello", special=False)
    finally:
        tok.close()
    assert len(chat) > len(plain) and chat[0] != plain[0]


def test_doc_qa_longer_than_the_context_is_refused_before_sending(
    vllm_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    done = bench_cli(
        "--endpoint", vllm_url + "/v1", "--workload", "doc-qa", "--num-requests", "20",
        "--gpu-telemetry", "off", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"max_model_len of {MAX_MODEL_LEN:,} tokens" in done.stderr
    assert not out.exists()


def test_multi_turn_chat_expected_equals_vllms_cached_tokens(vllm_url: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = bench_cli(
        "--endpoint", vllm_url + "/v1", "--workload", "multi-turn", "--api", "chat",
        "--num-requests", "24", "--set", "think_time=0.2", "--set", "output_len=16",
        "--gpu-telemetry", "off", "--out", str(out), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["requests"]["completed"] == 24
    requests = requests_table(out)
    assert (requests["status"] == "ok").all() and requests["cached_tokens"].notna().all()
    later = requests[~requests["id"].str.endswith("t000")]
    assert (later["cached_tokens"] > 0).all()
    matches = int((requests["cached_tokens"] == requests["expected_cached_tokens"]).sum())
    print(f"\nchat oracle vs vLLM cached_tokens: {matches}/{len(requests)}")
    assert assert_cached_as_expected(requests, AS_IT_HAPPENED) >= 1


def test_the_local_chat_template_gives_the_servers_ids(vllm_url: str) -> None:
    """--tokenizer MODEL_DIR renders the model's chat template exactly as vLLM does."""
    from workloads.tokenizer import LocalTokenizer

    local = LocalTokenizer(MODEL_DIR)
    server = ServerTokenizer(vllm_url, model=MODEL)
    try:
        for text in ("hello", " the cache block of a prefix,  x", "two\nlines"):
            assert local.encode_chat(chat_messages(text)) == server.encode_chat(chat_messages(text))
    finally:
        server.close()
    assert local.vocab_size == VOCAB_SIZE
