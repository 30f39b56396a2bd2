"""Every command's ``--help`` shows an example whose flags the command has, in the
user's words; ``--version`` answers."""

from __future__ import annotations

import shlex

import click
import typer
from typer.testing import CliRunner

from prefillscope.app import app
from prefillscope.examples import EXAMPLES
from runtime.version import package_version


def commands() -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}

    def walk(command: click.Command, path: list[str]) -> None:
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*path, name])
        else:
            found[" ".join(path)] = command

    walk(typer.main.get_command(app), [])
    return found


def test_every_command_has_examples_using_its_own_flags() -> None:
    found = commands()
    assert {"bench", "serve", "calc kv", "diagnose ab"} <= set(found)
    for path, command in found.items():
        assert path in EXAMPLES, f"{path} has no example"
        result = CliRunner().invoke(app, [*path.split(), "--help"], terminal_width=300)
        assert result.exit_code == 0 and "Examples:" in result.output, path
        flags = {opt for param in command.params for opt in param.opts if opt.startswith("--")}
        for line in EXAMPLES[path]:
            assert line.startswith(f"prefillscope {path}") or path == "diagnose run", line
            words = shlex.split(line)  # a quoted --launch command is one word
            used = {word.split("=")[0] for word in words if word.startswith("--")}
            assert used <= flags, (path, used - flags)


def test_help_speaks_the_users_words() -> None:
    for path in commands():
        result = CliRunner().invoke(app, [*path.split(), "--help"], terminal_width=300)
        assert "lesson" not in result.output.lower(), path
    assert "lesson" not in CliRunner().invoke(app, ["--help"]).output.lower()


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"prefillscope {package_version()}"
