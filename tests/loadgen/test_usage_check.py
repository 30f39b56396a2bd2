"""``loadgen.records.usage_suspect``: the server's usage checked against itself and the
stream, with each counting method's slack — and no real capture flagged."""

from __future__ import annotations

from pathlib import Path

import pytest
from repo_paths import FIXTURES

from loadgen.adapters.base import EventStream
from loadgen.adapters.llamacpp import LlamaCppStream
from loadgen.adapters.openai import OpenAIStream
from loadgen.records import suspect_kind, usage_suspect

APART = "completion_tokens != streamed tokens"
WHOLE = "cached_tokens = prompt_tokens"


@pytest.mark.parametrize(
    ("usage", "streamed", "method", "reason"),
    [
        ((100, 8, 40), 8, "usage", None),
        ((100, 9, 0), 8, "usage", None),  # a stop token the final usage adds
        ((100, 8, 140), 8, "usage", "cached_tokens > prompt_tokens (140 > 100)"),
        ((100, 8, 99), 8, "usage", None),  # the most a server can have cached
        ((100, 8, 100), 8, "usage", f"{WHOLE} (100: the last one is always computed)"),
        ((0, 8, 0), 8, "usage", None),  # an empty prompt: nothing cached, nothing claimed
        ((-5, 8, 0), 8, "usage", "negative prompt_tokens (-5)"),
        ((100, 8, -1), 8, "usage", "negative cached_tokens (-1)"),
        ((100, 48, 0), 8, "usage", f"{APART} (48 vs 8 counted by usage)"),
        ((100, 6, 0), 8, "token_ids", f"{APART} (6 vs 8 counted by token_ids)"),
        ((100, 48, 0), 8, "chunks", None),  # several tokens an event
        ((100, 2, 0), 8, "chunks", f"{APART} (2 vs 8 counted by chunks)"),
        ((100, 2, 0), 8, "tokenizer", None),  # a recount of text pieces: not compared
        ((None, None, None), 8, "usage", None),  # nothing reported: nothing to check
    ],
)  # fmt: skip
def test_usage_checks(usage: tuple, streamed: int, method: str, reason: str | None) -> None:
    assert usage_suspect(*usage, streamed, method) == reason


def test_every_impossibility_is_named_and_counted_by_kind() -> None:
    reason = usage_suspect(5, 40, -1, 8, "usage")
    assert reason is not None
    kinds = [suspect_kind(part) for part in reason.split("; ")]
    assert kinds == ["negative cached_tokens", APART]
    assert usage_suspect(5, 8, 10, 8, "usage") == "cached_tokens > prompt_tokens (10 > 5)"


CAPTURES = {
    "vllm-cpu/chat-stream-continuous-usage.sse": lambda: OpenAIStream(chat=True, continuous=True),
    "vllm-cpu/chat-stream-include-usage.sse": lambda: OpenAIStream(chat=True, continuous=False),
    "vllm-cpu/completions-stream-include-usage.sse": lambda: OpenAIStream(
        chat=False, continuous=False
    ),
    "llamacpp/v1-completions-stream.sse": lambda: OpenAIStream(chat=False, continuous=False),
    "llamacpp/v1-chat-completions-stream.sse": lambda: OpenAIStream(chat=True, continuous=False),
    "llamacpp/completion-native-stream.sse": LlamaCppStream,
}


@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_real_servers_usage_is_not_suspect(capture: str) -> None:
    stream: EventStream = CAPTURES[capture]()
    stream.feed(Path(FIXTURES / capture).read_bytes())
    stream.close()
    assert stream.completion_tokens is not None and stream.tokens > 0
    checked = (stream.prompt_tokens, stream.completion_tokens, stream.cached_tokens)
    assert usage_suspect(*checked, stream.tokens, stream.method) is None
    # the same stream with its final count 40 too high is caught where the method can tell
    inflated = usage_suspect(checked[0], checked[1] + 40, checked[2], stream.tokens, stream.method)
    assert (inflated is None) == (stream.method == "chunks")
