"""The ``prefillscope`` typer app, every command registered on it (``prefillscope.commands``).

Building it imports only what the commands' flags need — their types, help and defaults
— because every start of the CLI builds all of them: each command imports the libraries
it runs on (numpy, pandas, scipy, aiohttp …) when it runs, so ``--help`` and ``calc``
answer at once. ``tests/test_cli_startup.py`` keeps it that way. ``prefillscope.cli.main``
runs the app.
"""

from __future__ import annotations

import typer

from prefillscope.commands import register_all

app = typer.Typer(
    name="prefillscope",
    help="Benchmark and diagnose LLM servers: honest TTFT/ITL, prefix-cache oracles, verdicts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
register_all(app)
