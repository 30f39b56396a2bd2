"""The ``prefillscope`` command line: one typer app, one module per command.

Every command takes ``--json``. Bad input surfaces as one line on stderr and exit
status 2 (``InputError``), never as a traceback.
"""

from __future__ import annotations

import sys

import typer

from prefillscope.commands import register_all
from workloads.errors import InputError

try:  # typer >= 0.26 vendors its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer uses click itself
    import click.exceptions as click_exceptions  # type: ignore[no-redef]

app = typer.Typer(
    name="prefillscope",
    help="Benchmark and diagnose LLM servers: honest TTFT/ITL, prefix-cache oracles, verdicts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
register_all(app)


def _fail(message: str, status: int) -> None:
    print(f"prefillscope: error: {message}", file=sys.stderr)
    sys.exit(status)


def main() -> None:
    """Console-script entry point.

    Click runs outside its standalone mode so that a bad flag (a usage error) becomes the
    same single line as any other bad input, instead of click's multi-line usage box.
    """
    try:
        status = app(standalone_mode=False)
    except InputError as exc:
        _fail(str(exc), 2)
    except click_exceptions.NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        sys.exit(0)
    except click_exceptions.UsageError as exc:
        where = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        _fail(exc.format_message().replace("\n", " ") + where, 2)
    except (typer.Abort, KeyboardInterrupt):
        _fail("interrupted", 130)
    except click_exceptions.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    sys.exit(status if isinstance(status, int) else 0)
