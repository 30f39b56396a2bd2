"""The CLI builds only the command it runs; what the user sees is the whole app's."""

from __future__ import annotations

import typer.main
from typer.testing import CliRunner

from prefillscope.app import app
from prefillscope.cli import _invoked_only

NAMES = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]


def _help(of: typer.Typer, name: str) -> str:
    done = CliRunner().invoke(of, [name, "--help"], prog_name="prefillscope", terminal_width=100)
    assert done.exit_code == 0, done.output
    return done.output


def test_each_command_alone_with_the_same_help() -> None:
    assert {"bench", "serve", "calc", "diagnose"} <= set(NAMES)
    for name in NAMES:
        only = _invoked_only(app, [name])
        assert list(typer.main.get_command(only).commands) == [name]
        assert _help(only, name) == _help(app, name)


def test_anything_else_gets_the_whole_app() -> None:
    for args in ([], ["--help"], ["--version"], ["bnech"], ["--json", "bench"]):
        assert _invoked_only(app, args) is app
    assert len(app.registered_commands) > 1  # the app itself is left whole
