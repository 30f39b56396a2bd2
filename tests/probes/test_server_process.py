"""``probes.server_process.server_environment``: the settings a local server was started
with, read from its ``/proc/PID/environ`` (here a folder laid out as ``/proc`` is), with
every variable whose name is a credential's left out by the one redaction rule."""

from __future__ import annotations

from pathlib import Path

from probes.server_process import server_environment


def _proc(tmp_path: Path, pid: int, environ: dict[str, str]) -> Path:
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    raw = b"\0".join(f"{k}={v}".encode() for k, v in environ.items()) + b"\0"
    (proc / str(pid) / "environ").write_bytes(raw)
    return proc


def test_the_engines_settings_are_kept_and_credentials_left_out(tmp_path: Path) -> None:
    proc = _proc(
        tmp_path,
        42,
        {
            "SGLANG_USE_CPU_ENGINE": "1",
            "VLLM_MAX_TOKENS_PER_BATCH": "4096",  # a count, not a token
            "PYTHONPATH": "/opt/standin",
            "HF_HUB_OFFLINE": "1",
            "VLLM_API_KEY": "sk-secret-1234",
            "SGLANG_AUTH_HEADER": "Bearer abcdefgh",
            "LLAMA_ARG_PASS": "hunter22",
            "HOME": "/root",  # not a setting of the server
        },
    )
    assert server_environment(42, proc) == {
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": "/opt/standin",
        "SGLANG_USE_CPU_ENGINE": "1",
        "VLLM_MAX_TOKENS_PER_BATCH": "4096",
    }


def test_an_unreadable_environment_is_empty(tmp_path: Path) -> None:
    assert server_environment(7, tmp_path / "proc") == {}
