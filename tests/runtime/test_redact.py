"""``runtime.redact``: what counts as a secret, and what is left alone."""

from __future__ import annotations

import io
import sys

import pytest

from runtime import redact
from runtime.redact import MASK


def test_secret_flags_in_both_forms_and_inside_a_launch_command() -> None:
    argv = [
        "prefillscope", "bench", "--api-key", "sk-1111", "--api-key=sk-2222",
        "--endpoint", "https://user:hunter22@host:8000/v1", "--model", "m-sk-3333",
        "--max-tokens", "5", "--tokenizer", "tok-dir",
        "--launch", "env HF_TOKEN=hf-4444 vllm serve M --hf-token hf-5555 --db-password=pw-6666",
    ]  # fmt: skip
    out = redact.argv(argv, ["sk-3333"])
    assert out[3] == MASK and out[4] == f"--api-key={MASK}"
    assert out[6] == f"https://user:{MASK}@host:8000/v1"
    assert out[8] == f"m-{MASK}"
    assert out[9:13] == ["--max-tokens", "5", "--tokenizer", "tok-dir"]  # not secrets
    assert out[14] == f"env HF_TOKEN={MASK} vllm serve M --hf-token {MASK} --db-password={MASK}"
    secrets = ("sk-1111", "sk-2222", "sk-3333", "hunter22", "hf-4444", "hf-5555", "pw-6666")
    assert not any(s in " ".join(out) for s in secrets)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True), ("OPENAI_API_KEY", True), ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True), ("APIKEY", True), ("MAX_NUM_BATCHED_TOKENS", False),
        ("TOKENIZERS_PARALLELISM", False), ("PWD", False), ("PORT", False),
        ("DB_PASS", True), ("PROXY_AUTH", True), ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("BYPASS_CACHE", False), ("AUTHOR", False),
    ],
)  # fmt: skip
def test_environment_names(name: str, secret: bool) -> None:
    assert redact.secret_env_name(name) is secret
    assert redact.argv([f"{name}=value-1234"]) == [f"{name}={MASK if secret else 'value-1234'}"]


@pytest.mark.parametrize(
    ("flag", "secret"),
    [
        ("--api-key", True), ("--token", True), ("--hf-token", True), ("--key", True),
        ("--db-password", True), ("--client-secret-file", True), ("--max-tokens", False),
        ("--tokenizer", False), ("--keep-alive", False), ("-k", False),
    ],
)  # fmt: skip
def test_flag_names(flag: str, secret: bool) -> None:
    assert redact.secret_flag(flag) is secret


def test_text_headers_credentials_and_advice() -> None:
    text = (
        'headers {"Authorization": "Bearer sk-abcdefgh12", "x-api-key": "k-9876543"} '
        "then Basic dXNlcjpwYXNzd29yZA== and api-key: zz-1234567 via --hf-token=hf-77777777"
    )
    out = redact.text(text)
    for secret in ("sk-abcdefgh12", "k-9876543", "dXNlcjpwYXNzd29yZA==", "zz-1234567", "hf-7777"):
        assert secret not in out
    assert '"Authorization": "Bearer REDACTED"' in out and "Basic REDACTED" in out
    advice = "pass the server's API key (--api-key or PREFILLSCOPE_API_KEY)"
    assert redact.text(advice) == advice  # a flag named in advice is not followed by a key


def test_a_registered_secret_is_replaced_everywhere_and_short_ones_are_not() -> None:
    redact.register("echoed-key-31337", "ab")
    redact.register_urls("http://u:url-pass-4242@h:1/v1")
    doc = {"error_message": "bad key echoed-key-31337", "n": 3, "list": ["url-pass-4242", "ab"]}
    assert redact.document(doc) == {
        "error_message": f"bad key {MASK}",
        "n": 3,
        "list": [MASK, "ab"],
    }


def test_the_environment_gives_its_long_secret_values_only() -> None:
    redact.register_environment(
        {"MY_API_KEY": "env-key-24680", "HF_HUB_DISABLE_TOKEN": "true", "PATH": "/usr/bin:/b"}
    )
    assert redact.text("env-key-24680 true /usr/bin:/b") == f"{MASK} true /usr/bin:/b"


def test_guarded_streams_redact_what_is_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    redact.register("printed-secret-9999")
    with redact.guarded_streams():
        print("key printed-secret-9999 at http://a:b-pass@h")
        assert not sys.stdout.isatty()  # the stream's own attributes
    assert sys.stdout is out
    assert out.getvalue() == f"key {MASK} at http://a:{MASK}@h\n"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True), ("api-key", True), ("apiKey", True), ("APIKEY", True), ("key", True),
        ("token", True), ("access_token", True), ("auth", True), ("sig", True),
        ("signature", True), ("code", True), ("password", True), ("client_secret", True),
        ("X-Amz-Signature", True), ("X-Amz-Credential", True), ("X-Amz-Security-Token", True),
        ("max_tokens", False), ("model", False), ("deployment", False), ("api-version", False),
        ("X-Amz-Date", False), ("keep_alive", False),
    ],
)  # fmt: skip
def test_query_parameter_names(name: str, secret: bool) -> None:
    assert redact.secret_query_name(name) is secret
    url = f"https://h/v1?{name}=v-98765&n=1"
    assert redact.text(url) == f"https://h/v1?{name}={MASK if secret else 'v-98765'}&n=1"


def test_query_secrets_are_found_in_urls_and_command_lines_and_replaced_everywhere() -> None:
    url = "http://gw:8000/v1?api-version=2024&api_key=qk-5555aaaa&sig=ab%2Fcd12"
    assert redact.query_secrets(url) == ["qk-5555aaaa", "qk-5555aaaa", "ab%2Fcd12", "ab/cd12"]
    out = redact.argv(["prefillscope", "bench", "--endpoint", url])
    assert out[3] == f"http://gw:8000/v1?api-version=2024&api_key={MASK}&sig={MASK}"
    redact.register_urls(url)
    # a server echoing the key anywhere, and the HTML form of the URL (``&amp;``)
    echoed = "bad key qk-5555aaaa for sig ab/cd12"
    assert redact.text(echoed) == f"bad key {MASK} for sig {MASK}"
    assert redact.text("?a=1&amp;token=t-00001234") == f"?a=1&amp;token={MASK}"
