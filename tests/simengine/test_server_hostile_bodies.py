"""The embedded engine over HTTP against bodies a fuzzer would send: JSON nested past any
decoder's depth and numbers that are not finite get a 400 in OpenAI's error shape (not a
plain-text 500), and the server keeps serving."""

from __future__ import annotations

import pytest
from server_support import fast_config, served

NESTED = b'{"prompt": "x", "extra": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"


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


def test_an_id_list_past_max_model_len_is_refused_for_its_length_before_its_ids_are_read() -> None:
    """A body of many times ``max_model_len`` ids is refused by its length, without a
    scan of every id (which ran on the server's loop: a million ids stalled it 0.2 s);
    the bad id at its end is never reached. /tokenize still reads every id."""
    config = fast_config()
    prompt = [5] * config.max_model_len + [-1]
    with served(config) as client:
        response = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1})
        assert response.status_code == 400
        assert "maximum context length" in response.json()["error"]["message"]
        tokenize = client.post("/tokenize", json={"prompt": prompt})
        assert tokenize.status_code == 400 and "out of vocabulary" in tokenize.text
