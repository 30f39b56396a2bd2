"""The ``prefillscope`` command line: one typer app, one module per command.

Every command takes ``--json``. Bad input surfaces as one line on stderr and exit
status 2 (``InputError``), never as a traceback.
"""

from __future__ import annotations

import sys

import typer

from prefillscope.commands import register_all
from workloads.errors import InputError

app = typer.Typer(
    name="prefillscope",
    help="Benchmark and diagnose LLM servers: honest TTFT/ITL, prefix-cache oracles, verdicts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
register_all(app)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except InputError as exc:
        print(f"prefillscope: error: {exc}", file=sys.stderr)
        sys.exit(2)
