"""Chat prompts as the server tokenizes them: the chat template locally, the server's
``/tokenize`` with messages, and the oracle exact for ``multi-turn --api chat``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_support import bench_cli, requests_table
from oracle_races import AS_IT_HAPPENED, assert_cached_as_expected
from workloads_util import train_tokenizer

from perfmodel.config import EngineConfig
from simengine.embedded import EmbeddedServer
from workloads.errors import InputError
from workloads.tokenizer import LocalTokenizer, ServerTokenizer, chat_messages

#: A ChatML template, as a model's tokenizer_config.json holds it.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    train_tokenizer(folder)
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": CHATML}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_the_chat_template_renders_and_tokenizes_without_added_specials(model_dir: Path) -> None:
    tok = LocalTokenizer(model_dir)
    ids = tok.encode_chat(chat_messages("the cache block"))
    text = "<|im_start|>user\nthe cache block<|im_end|>\n<|im_start|>assistant\n"
    assert ids == tok.encode(text, special=False)
    assert ids[0] != tok.encode("x", special=True)[0]  # no <s> added in front
    assert tok.vocab_size == 2000


def test_a_model_name_is_found_in_the_local_hugging_face_cache(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "hub" / "models--acme--tiny-chat"
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (snapshot / name).write_bytes((model_dir / name).read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    tok = LocalTokenizer("acme/tiny-chat")
    assert tok.source == str(snapshot / "tokenizer.json")
    assert tok.encode_chat(chat_messages("x")) == LocalTokenizer(model_dir).encode_chat(
        chat_messages("x")
    )
    with pytest.raises(InputError) as info:
        LocalTokenizer("acme/not-downloaded")
    assert info.value.field == "--tokenizer" and "\n" not in str(info.value)


def test_a_tokenizer_without_a_chat_template_says_so(tmp_path: Path) -> None:
    train_tokenizer(tmp_path)
    with pytest.raises(InputError, match="no chat_template"):
        LocalTokenizer(tmp_path).encode_chat(chat_messages("x"))


def test_the_servers_tokenize_with_messages_is_what_chat_completions_see() -> None:
    with EmbeddedServer(EngineConfig(fixed_step_s=0.001)) as server:
        tok = ServerTokenizer(server.url + "/v1", model=server.config.model_name)
        try:
            ids = tok.encode_chat(chat_messages("hello there"))
            plain = tok.encode("hello there", special=True)
        finally:
            tok.close()
    assert len(ids) > len(plain)  # the template's role markers and generation prompt


def test_multi_turn_chat_expected_equals_reported_for_every_request(tmp_path: Path) -> None:
    """Sessions whose history is the server's own text, through the chat API, with no
    --vocab-size and no --model: every turn's expected cached tokens are the server's."""
    with EmbeddedServer(EngineConfig(fixed_step_s=0.001)) as server:
        out = tmp_path / "run"
        done = bench_cli(
            "--endpoint", server.url.removeprefix("http://") + "/v1", "--workload",
            "multi-turn", "--api", "chat", "--num-requests", "16", "--set", "think_time=0.05",
            "--set", "turns=4", "--gpu-telemetry", "off", "--out", str(out), "--json",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    requests = requests_table(out)
    assert len(requests) == 16 and (requests["status"] == "ok").all()
    later = requests[requests["id"].str.endswith(("t001", "t002", "t003"))]
    assert len(later) == 12 and (later["cached_tokens"] > 0).all()
    assert requests["expected_cached_tokens"].notna().all()
    assert assert_cached_as_expected(requests, AS_IT_HAPPENED) >= 1
