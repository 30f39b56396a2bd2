"""The ``prefillscope`` typer app, every command registered on it (``prefillscope.commands``).

Building it imports only what the commands' flags need — their types, help and defaults
— because every start of the CLI builds all of them: each command imports the libraries
it runs on (numpy, pandas, scipy, aiohttp …) when it runs, so ``--help`` and ``calc``
answer at once. ``tests/cli/test_cli_startup.py`` keeps it that way. ``prefillscope.cli.main``
runs the app built for its command line (``build_app``: the one command it names, or all).
"""

from __future__ import annotations

from typing import Annotated

import typer

from prefillscope.commands import register_all


def build_app(command: str | None = None) -> typer.Typer:
    """The app with every command, or (``command`` one of ``commands.COMMANDS``) with that
    one alone: what ``prefillscope.cli.main`` runs for the command line it was given."""
    built = typer.Typer(
        name="prefillscope",
        help="Benchmark and diagnose LLM servers: honest TTFT/ITL, prefix-cache oracles, verdicts.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    built.callback()(_main)
    register_all(built, command)
    return built


def _print_version(value: bool) -> None:
    if value:
        from runtime.version import package_version

        typer.echo(f"prefillscope {package_version()}")
        raise typer.Exit()


def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version; exit."
        ),
    ] = False,
) -> None:
    """Benchmark and diagnose LLM servers: honest TTFT/ITL, prefix-cache oracles, verdicts."""


def __getattr__(name: str) -> typer.Typer:
    """``app``: the whole app, every command on it, built on first use."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    whole = globals()["app"] = build_app()
    return whole
