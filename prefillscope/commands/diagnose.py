"""``prefillscope diagnose RUN_DIR``: the hypothesis checklist over one run.

``diagnose`` is a command *group* (``prefillscope.diagnose_group``), so that experiments
live beside the run form: ``prefillscope diagnose ab …`` (the chunk-size A/B) registers
itself on ``diagnose_app`` from its own module (``diagnose_app.command("ab")(ab)`` in that
module's ``register``). The run form needs no sub-command name: ``DiagnoseGroup`` sends
any argument list whose first word is not a sub-command to the hidden ``run`` command, so

    prefillscope diagnose runs/x --slo itl=50ms     ≡  prefillscope diagnose run runs/x --slo …
    prefillscope diagnose --json runs/x             ≡  prefillscope diagnose run --json runs/x
    prefillscope diagnose ab --chunks 512,2048 …    →  the ``ab`` sub-command

(a run directory literally named like a sub-command is reached as ``./ab`` or with
``run``). The diagnosis is written to ``RUN_DIR/diagnosis.json`` (what ``report`` shows)
and printed as a table, or as that JSON with ``--json``.

The checklist (pandas, scipy) and the view (``prefillscope.diagnosis_view``, rich) are
imported when a diagnosis runs, so the CLI starts without them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from prefillscope.diagnose_group import RUN_COMMAND, diagnose_app
from workloads.limits import MAX_TOKENS, Bound


def diagnose_run(
    run_dir: Annotated[
        Path,
        typer.Argument(metavar="RUN_DIR", help="A run directory written by `prefillscope bench`."),
    ],
    slo: Annotated[
        str | None,
        typer.Option(help="Absolute SLOs, e.g. itl=50ms,ttft=1 (default: the run's own)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Model behind the server, for the roofline (preset or custom:…)."),
    ] = None,
    gpu: Annotated[
        str | None, typer.Option(help="GPU preset behind the server (h100-sxm, l40s …).")
    ] = None,
    tensor_parallel_size: Annotated[
        int | None, typer.Option(help="Tensor-parallel GPUs per replica.")
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-num-batched-tokens",
            "--chunk-budget",
            help="The server's token budget per step (vLLM --max-num-batched-tokens, SGLang "
            "--chunked-prefill-size, llama.cpp --batch-size), if not recorded.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print diagnosis.json instead.")] = False,
) -> None:
    """Judge H1-H4, overload, the client and the prefix cache; name the primary finding."""
    from rich.console import Console

    from diagnose.checklist import run_checklist, write_diagnosis
    from diagnose.context import DiagnoseOptions
    from prefillscope.diagnosis_view import render
    from probes.slo import parse_slo

    for flag, value, bound in (
        ("--tensor-parallel-size", tensor_parallel_size, Bound(1, 4096, whole=True)),
        ("--max-num-batched-tokens", max_num_batched_tokens, Bound(1, MAX_TOKENS, whole=True)),
    ):
        bound.check(flag, value)
    options = DiagnoseOptions(
        slo=parse_slo(slo) if slo else None,
        model=model,
        gpu=gpu,
        tensor_parallel_size=tensor_parallel_size,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    diagnosis = run_checklist(run_dir, options)
    write_diagnosis(run_dir, diagnosis)  # a failed write: runtime.atomic's one line, exit 6
    if json_out:
        typer.echo(json.dumps(diagnosis.to_json(), indent=2, ensure_ascii=False))
    else:
        render(diagnosis, Console())


diagnose_app.command(RUN_COMMAND, hidden=True)(diagnose_run)


def register(app: typer.Typer) -> None:
    app.add_typer(diagnose_app, name="diagnose")
