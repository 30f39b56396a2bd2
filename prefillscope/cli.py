"""The ``prefillscope`` command line: one typer app (``prefillscope.app``), one module per command.

Every command takes ``--json``. Bad input surfaces as one line on stderr and exit
status 2 (``InputError``), never as a traceback; a write that failed (``runtime.atomic``)
as one line saying what was kept and exit status 6. The app is imported inside ``main``, so
a Ctrl-C pressed while the CLI loads is the same one line and exit status 130 as one
pressed later. SIGTERM and SIGHUP stop a command as Ctrl-C does (``runtime.signals``),
with exit status 143 and 129.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import typer


def _fail(message: str, status: int) -> NoReturn:
    print(f"prefillscope: error: {message}", file=sys.stderr)
    sys.exit(status)


def main() -> None:
    """Console-script entry point."""
    from runtime import collector, redact, signals
    from runtime.arrow_pool import settle_arrow_pool
    from runtime.native_threads import settle_blas_threads

    settle_blas_threads()  # before anything imports numpy
    settle_arrow_pool()  # and pyarrow
    signals.install()
    # Every secret of the command line and the environment is replaced in whatever the
    # command prints (and, by the writers, in whatever it writes).
    redact.register_argv(sys.argv)
    redact.register_environment()
    with redact.guarded_streams():
        try:
            with collector.paused():  # a burst of imports (runtime.collector)
                from prefillscope.app import build_app

                app = build_app(sys.argv[1] if len(sys.argv) > 1 else None)
                if "--help" in sys.argv or len(sys.argv) < 3:  # help may be printed
                    from prefillscope.help_format import names_one_per_line

                    names_one_per_line()
        except KeyboardInterrupt as exc:
            _interrupted(exc)
        _run(app)


def _interrupted(exc: KeyboardInterrupt) -> NoReturn:
    """One line and 130 for Ctrl-C; 128 + the signal's number for SIGTERM and SIGHUP."""
    from runtime.signals import Stopped

    if isinstance(exc, Stopped) and exc.name != "Ctrl-C":
        _fail(f"interrupted ({exc.name})", exc.exit_code)
    _fail("interrupted", 130)


def _run(app: typer.Typer) -> NoReturn:
    """Run the app, turning every way it can end into one line and an exit status.

    Click runs outside its standalone mode so that a bad flag (a usage error) becomes the
    same single line as any other bad input, instead of click's multi-line usage box.
    """
    import typer

    from runtime.atomic import EXIT_WRITE_FAILED, WriteFailed
    from workloads.errors import InputError

    try:  # typer >= 0.26 vendors its own copy of click
        from typer._click import exceptions as click_exceptions
    except ImportError:  # pragma: no cover - older typer uses click itself
        import click.exceptions as click_exceptions  # type: ignore[no-redef]

    try:
        status = _invoked_only(app, sys.argv[1:])(standalone_mode=False)
    except InputError as exc:
        _fail(str(exc), 2)
    except WriteFailed as exc:  # runtime.atomic: the target as it was, no temporary left
        _fail(f"write failed: {exc}", EXIT_WRITE_FAILED)
    except click_exceptions.NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        sys.exit(0)
    except click_exceptions.UsageError as exc:
        where = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        _fail(exc.format_message().replace("\n", " ") + where, 2)
    except KeyboardInterrupt as exc:
        _interrupted(exc)
    except typer.Abort:
        _fail("interrupted", 130)
    except click_exceptions.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    if status == 130:  # typer's status for a KeyboardInterrupt (a Stopped too) in a command
        _signalled()
    sys.exit(status if isinstance(status, int) else 0)


def _invoked_only(app: typer.Typer, args: list[str]) -> typer.Typer:
    """The app with only the command (or command group) ``args`` starts with.

    On every start typer turns each registered command's signature into click
    parameters, ~0.05 CPU-s for all of them, where one command runs. Anything that names
    no command — an option, a misspelt name — gets the whole app, with its help and its
    suggestions.
    """
    import copy

    name = args[0] if args else None
    commands = [c for c in app.registered_commands if c.name == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    only = copy.copy(app)
    only.registered_commands, only.registered_groups = commands, groups
    return only


def _signalled() -> None:
    """Typer turns a ``KeyboardInterrupt`` raised in a command into status 130 and drops
    it; a SIGTERM or SIGHUP that ended the command gets its own line and status."""
    import signal

    from runtime.signals import Stopped, received

    sig = received()
    if sig is not None and sig != signal.SIGINT:
        _interrupted(Stopped(sig))
