"""The hot path's JSON: orjson where it can, json's answer wherever orjson would differ."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from loadgen.adapters.base import EventStream
from runtime.json_codec import dumps as encode
from runtime.json_codec import loads


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "prompt": list(range(1000, 9000)), "max_tokens": 8, "stream": True},
        {"prompt": 'héllo \u2028 “quoted” "x" \\ \n', "temperature": 0.0, "top_p": 1e-300},
        {"prompt": [2**70], "seed": -(2**63)},  # beyond orjson's 64 bits: json encodes it
    ],
)
def test_a_body_decodes_to_what_was_encoded(body) -> None:
    assert json.loads(encode(body)) == body


def test_a_prompt_of_numpy_ids_is_written_as_its_integers() -> None:
    """The plan's ids go out as the array they are drawn as: the same JSON as their list,
    on orjson's path and on json's (a value only json takes, beside a non-contiguous array)."""
    ids = np.arange(120_000, 128_192, dtype=np.int64)
    assert encode({"prompt": ids}) == encode({"prompt": ids.tolist()})
    body = {"prompt": ids[::2], "seed": 2**70}
    assert json.loads(encode(body)) == {"prompt": ids[::2].tolist(), "seed": 2**70}


def test_events_json_accepts_are_read_as_json_reads_them() -> None:
    event = b'{"choices":[{"logprobs":{"token_logprobs":[-Infinity, NaN]}}],"n":2e400,"i":%d}' % (
        2**70
    )
    decoded = loads(event)
    assert decoded["i"] == 2**70 and decoded["n"] == math.inf
    values = decoded["choices"][0]["logprobs"]["token_logprobs"]
    assert values[0] == -math.inf and math.isnan(values[1])
    with pytest.raises(ValueError):
        loads(b'{"choices": [')


def test_a_malformed_event_is_still_reported_as_one() -> None:
    stream = EventStream()
    assert stream.decode(b"{not json}") is None
    assert stream.malformed is not None and "not a JSON object" in stream.malformed
    assert stream.decode(b"[1, 2]") is None  # valid JSON, not an object
