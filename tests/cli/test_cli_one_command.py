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


def test_a_command_line_imports_its_own_command_module_only() -> None:
    """``main`` registers the named command's modules alone (``build_app``): the other
    commands' modules and what their flags import are never loaded; a command line that
    names none gets them all."""
    import json
    import subprocess
    import sys

    from prefillscope.commands import COMMAND_MODULES, COMMANDS

    def loaded(*argv: str) -> set[str]:
        code = (
            "import json, sys\n"
            "from prefillscope.cli import main\n"
            f"sys.argv = ['prefillscope', *{list(argv)!r}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "names = [m for m in sys.modules if m.startswith('prefillscope.commands.')]\n"
            "print(json.dumps(names))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        return {name.rsplit(".", 1)[1] for name in json.loads(done.stdout.splitlines()[-1])}

    assert loaded("bench", "--help") == {"bench"}
    assert loaded("diagnose", "ab", "--help") == set(COMMANDS["diagnose"])
    assert loaded("--help") == set(COMMAND_MODULES)
    assert loaded("bnech") == set(COMMAND_MODULES)  # its suggestion needs every name


def test_building_the_app_twice_registers_each_command_once() -> None:
    """``diagnose ab`` goes on the module's own ``diagnose`` group: a second build must
    not put it there twice."""
    from prefillscope.app import build_app
    from prefillscope.commands.diagnose import diagnose_app
    from prefillscope.commands.diagnose_ab import ab

    for _ in range(2):
        build_app("diagnose")
    assert [info.callback for info in diagnose_app.registered_commands].count(ab) == 1
