"""The embedded engine over HTTP against bodies a fuzzer would send: JSON nested past any
decoder's depth and numbers that are not finite get a 400 in OpenAI's error shape (not a
plain-text 500), and the server keeps serving."""

from __future__ import annotations

import pytest
from server_support import served

NESTED = b'{"prompt": "x", "extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (NESTED, "nested too deeply"),
        (b'{"prompt": "x", "max_tokens": 2, "temperature": NaN}', "NaN is not a JSON number"),
        (b'{"prompt": "x", "max_tokens": 2, "temperature": Infinity}', "Infinity"),
        (b'{"prompt": "x", "max_tokens": 2, "temperature": -Infinity}', "-Infinity"),
        (b'{"prompt": "x", "max_tokens": 2, "temperature": 1e400}', "out of range"),
    ],
)
def test_hostile_json_is_a_400_in_openai_shape(raw: bytes, says: str) -> None:
    with served() as client:
        response = client.post(
            "/v1/completions", content=raw, headers={"content-type": "application/json"}
        )
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "BadRequestError" and error["code"] == 400
        assert says in error["message"]
        ok = client.post("/v1/completions", json={"prompt": "still there?", "max_tokens": 2})
        assert ok.status_code == 200
