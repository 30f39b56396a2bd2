"""The A/B a diagnosis proposes starts the server the run measured, as it was started.

``run.json`` records how the server was started (``target.server_info.command``: the
local listener's command line, or SGLang's ``launch_command``), its model's path and its
chunk budget. The ``--launch`` template is that command with its chunk flags and port
made ``{chunk}`` and ``{port}``; without one, the flavour's template with the model's
*path* (not the name it is served by); the chunk sizes are the run's budget and a
smaller one. Every ``prefillscope`` command in the advice parses
(``next_commands.commands``), and the rendered launch names a program and a model that
exist (``next_commands.dry_run``).
"""

from __future__ import annotations

import shlex
import sys

from next_commands import commands, dry_run
from rundirs import write_run

from diagnose.context import DiagnoseOptions, build_context
from diagnose.inputs import load_run_view
from diagnose.next_steps import ab_command, chunk_pair, launch_template, recorded_budget
from workloads.spec import load_spec

SPEC = load_spec("long-prompt", {"num_requests": 4, "prompt_len": 256}).to_dict()


def _view(tmp_path, target: dict):
    path = write_run(tmp_path / "run", info={"workload": SPEC, "target": target})
    return load_run_view(path)


def test_the_launch_is_the_recorded_command_with_chunk_and_port_filled_per_arm(tmp_path):
    model = tmp_path / "models" / "tiny-llama"
    model.mkdir(parents=True)
    argv = [
        sys.executable, "-m", "sglang.launch_server", "--model-path", str(model),
        "--served-model-name", "tiny-llama", "--port", "30011",
        "--chunked-prefill-size", "1024", "--page-size", "1",
    ]  # fmt: skip
    env = {"SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": "/opt/standin"}
    info = {"model_path": str(model), "command": argv, "environment": env}
    view = _view(tmp_path, {"flavour": "sglang", "model": "tiny-llama", "server_info": info})
    assert recorded_budget(view) == (1024, "run.json (the server's command line, "
                                           "--chunked-prefill-size)")  # fmt: skip
    template = launch_template(view)
    assert shlex.split(template) == [
        "env", "SGLANG_USE_CPU_ENGINE=1", "PYTHONPATH=/opt/standin", *argv[:7],
        "--port", "{port}", "--chunked-prefill-size", "{chunk}", "--page-size", "1",
    ]  # fmt: skip
    budget, _ = build_context(view, DiagnoseOptions()).budget
    (words,) = commands(f"Confirm it: {ab_command(view, chunk_pair(budget))}  — then compare.")
    assert words[words.index("--chunks") + 1] == "512,1024"
    assert dry_run(words, tmp_path).startswith("diagnose ab: --launch renders")


def test_without_a_recorded_command_the_template_names_the_model_path(tmp_path):
    view = _view(
        tmp_path,
        {"flavour": "vllm", "model": "served-name", "server_info": {"model_path": "/m/llama"}},
    )
    assert launch_template(view) == (
        "vllm serve /m/llama --max-num-batched-tokens {chunk} --port {port}"
    )
    assert recorded_budget(view) == (None, "unknown")


def test_sglangs_own_budget_is_the_runs(tmp_path):
    info = {"chunk_budget": 2048}
    view = _view(tmp_path, {"flavour": "sglang", "model": "m", "server_info": info})
    assert recorded_budget(view) == (2048, "run.json (the server's own arguments)")


def test_commands_are_taken_out_of_prose_up_to_where_prose_resumes():
    text = (
        "Measure it with `prefillscope report /r` first; predict it: prefillscope simulate "
        "--workload /r --disaggregate 1:1 (TTFT, ITL); then: prefillscope bench --workload "
        "long-prompt --launch 'a b {chunk}' — then compare with `prefillscope compare`."
    )
    assert commands(text) == [
        ["prefillscope", "report", "/r"],
        ["prefillscope", "simulate", "--workload", "/r", "--disaggregate", "1:1"],
        ["prefillscope", "bench", "--workload", "long-prompt", "--launch", "a b {chunk}"],
    ]
