"""``prefillscope serve`` as a user runs it: a real process, its flags, its exit codes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest

from prefillscope.cli import main

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "serve"]


def test_serve_listens_prints_its_config_and_stops_on_ctrl_c() -> None:
    flags = [
        "--port", "0", "--json", "--fixed-step-ms", "2", "--num-gpu-blocks", "300",
        "--block-size", "32", "--served-model-name", "cli-model", "--max-model-len", "4096",
        "--no-enable-prefix-caching", "--stream-interval", "2",
    ]  # fmt: skip
    proc = subprocess.Popen(
        [*CLI, *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        info = json.loads(proc.stdout.readline())
        assert info["num_gpu_blocks"] == 300 and info["block_size"] == 32
        assert info["served_model_name"] == "cli-model" and info["stream_interval"] == 2
        assert info["fixed_step_s"] == pytest.approx(0.002)
        with httpx.Client(base_url=info["url"], timeout=10) as client:
            assert client.get("/v1/models").json()["data"][0]["max_model_len"] == 4096
            body = {"model": "cli-model", "prompt": "hi", "max_tokens": 3, "ignore_eos": True}
            assert (
                client.post("/v1/completions", json=body).json()["usage"]["completion_tokens"] == 3
            )
            text = client.get("/metrics").text
            assert 'enable_prefix_caching="False"' in text and 'block_size="32"' in text
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--block-size", "0"], "--block-size"),
        (["--stream-interval", "0"], "--stream-interval"),
        (["--port", "70000"], "--port"),
        (["--model", "gpt-9"], "--model"),
        (["--fixed-step-ms", "-1"], "--fixed-step-ms"),
        (["--max-num-batched-tokens", "8", "--max-num-seqs", "16"], "--max-num-batched-tokens"),
        (["--host-overhead-per-seq-us", "-1"], "--host-overhead-per-seq-us"),
        (["--tensor-parallel-size", "3"], "--tensor-parallel-size"),
        (["--cache-model", "lru"], "--cache-model"),
        (["--cache-model", "slots:0"], "--cache-model"),
        (["--cache-model", "slots"], "--cache-model"),
        (["--cache-model", "radix:x"], "--cache-model"),
        (["--cache-model", "slots:4,similarity=2"], "--cache-model"),
        (["--cache-model", "radix", "--disaggregate", "1:1"], "--cache-model"),
    ],
)
def test_bad_flags_are_one_line_errors(
    flags: list[str], field: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(sys, "argv", ["prefillscope", "serve", *flags])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"prefillscope: error: {field}")
