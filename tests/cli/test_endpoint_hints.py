"""Wrong endpoints get one line that names the fix (exit 2, nothing written): a web server
that is not an LLM server, ``https://`` to a plain-http server, a dataset file that is
not there (under the flag the user typed)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench_support import bench_cli

SMALL = ["--random-input-len", "16", "--num-prompts", "2", "--gpu-telemetry", "off"]


@contextmanager
def _web_server(root: Path) -> Iterator[str]:
    """Python's own static file server: HTML answers, a 501 page for POST."""

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _one_line(done, out: Path) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and not out.exists(), done.stderr
    return lines[0]


def test_a_web_server_that_is_not_an_llm_server_is_named_so(tmp_path: Path):
    out = tmp_path / "run"
    with _web_server(tmp_path) as where:
        # with or without --model and --vocab-size: the first answer says what it is
        for extra in ([], ["--model", "m", "--vocab-size", "100"]):
            done = bench_cli("--endpoint", f"http://{where}", *SMALL, *extra, "--out", str(out))
            line = _one_line(done, out)
            assert "--endpoint:" in line and "is not an OpenAI-compatible server" in line
            assert "<html" not in line.lower() and "pass --model" not in line


def test_https_to_a_plain_http_server_says_use_http(tmp_path: Path):
    out = tmp_path / "run"
    with _web_server(tmp_path) as where:
        done = bench_cli("--endpoint", f"https://{where}", *SMALL, "--out", str(out))
    line = _one_line(done, out)
    assert line.endswith(f"(use http://{where})"), line


def test_a_missing_dataset_file_names_the_flag_typed(tmp_path: Path):
    out = tmp_path / "run"
    missing = tmp_path / "sharegpt.json"
    vllm_form = ["--dataset-name", "sharegpt", "--dataset-path", str(missing)]
    for args, flag in (
        (vllm_form, "--dataset-path"),
        (["--dataset", f"sharegpt:{missing}"], "--dataset"),
    ):
        line = _one_line(bench_cli(*args, "--out", str(out)), out)
        assert line.startswith(f"prefillscope: error: {flag}: {missing}: no such file"), line
