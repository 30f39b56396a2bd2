"""`prefillscope calc`: the lesson's worked figures, through the real command line."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from prefillscope.app import app
from prefillscope.cli import main
from workloads.errors import InputError

runner = CliRunner()


def _main(args: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> tuple:
    """Run the console-script entry point in-process: (exit status, stderr)."""
    monkeypatch.setattr(sys, "argv", ["prefillscope", "calc", *args.split()])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return exit_info.value.code, capsys.readouterr().err


def _json(args: str) -> dict:
    result = runner.invoke(app, ["calc", *args.split(), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("budget", "decodes", "prompt", "expected"),
    [
        (512, 4, 2048, [508, 508, 508, 508, 16]),
        (1024, 300, 3500, [724, 724, 724, 724, 604]),
    ],
)
def test_chunks(budget: int, decodes: int, prompt: int, expected: list[int]) -> None:
    args = f"chunks --budget {budget} --decodes {decodes} --prompt {prompt}"
    assert _json(args)["chunks"] == expected


def test_chunks_when_decodes_take_the_budget_exit_1_with_one_line(monkeypatch, capsys) -> None:
    code, err = _main("chunks --budget 256 --decodes 256 --prompt 1000", monkeypatch, capsys)
    assert code == 1
    assert err.count("\n") == 1
    assert "prefill cannot progress" in err


def test_prefix_3000_with_2500_cached() -> None:
    out = _json("prefix --prompt 3000 --cached-prefix 2500 --block-size 16 --params 8e9")
    assert out["reused_blocks"] == 156
    assert out["cached_tokens"] == 2496
    assert out["fresh_tokens"] == 504
    assert out["pairs_suffix_prefix"] == 1_257_984
    assert out["pairs_suffix_suffix"] == 127_260
    assert out["pairs_total"] == 1_385_244
    assert out["pairs_full"] == 4_501_500
    assert out["pairs_skipped"] == 3_116_256
    assert out["linear_flops"] == pytest.approx(8.064e12)


def test_prefix_4000_with_3100_cached_block_32() -> None:
    out = _json("prefix --prompt 4000 --cached-prefix 3100 --block-size 32")
    assert (out["reused_blocks"], out["cached_tokens"], out["fresh_tokens"]) == (96, 3072, 928)
    assert out["pairs_total"] == 3_281_872
    assert out["linear_flops"] is None


def test_prefix_whole_prompt_cached_still_recomputes_the_last_block() -> None:
    out = _json("prefix --prompt 64 --cached-prefix 64 --block-size 16")
    assert out["cached_tokens"] == 48
    assert out["fresh_tokens"] == 16


@pytest.mark.parametrize(
    ("layers", "tokens", "gbps", "per_token", "total", "seconds"),
    [
        (32, 2048, 100, 131_072, 268_435_456, 0.021475),
        (40, 4096, 200, 163_840, 671_088_640, 0.0268435),
    ],
)
def test_kv(
    layers: int, tokens: int, gbps: int, per_token: int, total: int, seconds: float
) -> None:
    out = _json(
        f"kv --layers {layers} --kv-heads 8 --head-dim 128 --dtype fp16 --tokens {tokens} "
        f"--link-gbps {gbps}"
    )
    assert out["bytes_per_token"] == per_token
    assert out["total_bytes"] == total
    assert out["transfer_seconds"] == pytest.approx(seconds, rel=1e-4)


def test_kv_protocol_efficiency_and_pipelined_transfer_leave_the_ideal_figures() -> None:
    out = _json(
        "kv --model llama-3.1-8b --dtype bf16 --tokens 2048 --link-gbps 100 "
        "--efficiency 0.8 --chunk 512 --chunk-ms 20"
    )
    assert (out["bytes_per_token"], out["total_bytes"]) == (131_072, 268_435_456)
    assert out["transfer_seconds"] == pytest.approx(0.021475, rel=1e-4)
    assert out["effective_transfer_seconds"] == pytest.approx(0.021474836 / 0.8, rel=1e-6)
    # the link (6.7 ms a chunk at 80 %) keeps up with 20 ms chunks: the last chunk is left
    assert out["pipelined_exposed_seconds"] == pytest.approx(0.021474836 / 4 / 0.8, rel=1e-6)
    slow_link = _json(
        "kv --model llama-3.1-8b --dtype bf16 --tokens 2048 --link-gbps 10 "
        "--chunk 512 --chunk-ms 20"
    )
    # 53.7 ms a chunk behind 20 ms chunks: the link's backlog is exposed, 4 × 53.7 − 3 × 20
    assert slow_link["pipelined_exposed_seconds"] == pytest.approx(
        4 * 0.053687091 - 3 * 0.020, rel=1e-6
    )


def test_kv_from_a_model_preset_matches_explicit_shape() -> None:
    preset = _json("kv --model llama-3.1-8b --dtype bf16 --tokens 2048")
    assert preset["bytes_per_token"] == 131_072
    assert preset["transfer_seconds"] is None


def test_human_output_is_a_table() -> None:
    result = runner.invoke(
        app, ["calc", "chunks", "--budget", "512", "--decodes", "4", "--prompt", "2048"]
    )
    assert result.exit_code == 0
    assert "508, 508, 508, 508, 16" in result.stdout


def test_bad_flag_exits_2_with_one_line_naming_the_field(monkeypatch, capsys) -> None:
    code, err = _main("prefix --prompt 100 --cached-prefix -1", monkeypatch, capsys)
    assert code == 2
    assert err.count("\n") == 1
    assert "--cached-prefix" in err


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ("chunks --budget 0 --prompt 10", "--budget"),
        ("chunks --budget 10 --decodes -1 --prompt 10", "--decodes"),
        ("prefix --prompt 100 --cached-prefix 10 --block-size 0", "--block-size"),
        ("kv --tokens 10 --layers 2 --kv-heads 1 --head-dim 8 --dtype fp9", "--dtype"),
        ("kv --tokens 10", "--layers"),
        ("kv --tokens 10 --model gpt-5", "--model"),
        ("kv --tokens 10 --model llama-3.1-8b --link-gbps 0", "--link-gbps"),
        ("kv --tokens 10 --model llama-3.1-8b --link-gbps 1 --efficiency 0", "--efficiency"),
        ("kv --tokens 10 --model llama-3.1-8b --link-gbps 1 --chunk 4", "--chunk-ms"),
    ],
)
def test_bad_flags_raise_input_error_naming_the_field(args: str, field: str) -> None:
    result = runner.invoke(app, ["calc", *args.split()])
    assert isinstance(result.exception, InputError)
    assert result.exception.field == field
