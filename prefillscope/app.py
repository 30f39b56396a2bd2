"""The ``prefillscope`` typer app, every command registered on it (``prefillscope.commands``).

Building it imports only what the commands' flags need — their types, help and defaults
— because every start of the CLI builds all of them: each command imports the libraries
it runs on (numpy, pandas, scipy, aiohttp …) when it runs, so ``--help`` and ``calc``
answer at once. ``tests/cli/test_cli_startup.py`` keeps it that way. ``prefillscope.cli.main``
runs the app.
"""

from __future__ import annotations

from typing import Annotated

import typer

from prefillscope.commands import register_all

app = typer.Typer(
    name="prefillscope",
    help="Benchmark and diagnose LLM servers: honest TTFT/ITL, prefix-cache oracles, verdicts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from runtime.version import package_version

        typer.echo(f"prefillscope {package_version()}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version; exit."
        ),
    ] = False,
) -> None:
    """Benchmark and diagnose LLM servers: honest TTFT/ITL, prefix-cache oracles, verdicts."""


register_all(app)
