"""Each command lives in its own module and registers itself on the app here."""

from __future__ import annotations

import importlib

import typer

#: Each command (or command group) the app has, and the modules, each exposing
#: ``register(app)``, that put it there, in the order ``--help`` lists them.
COMMANDS: dict[str, tuple[str, ...]] = {
    "bench": ("bench",),
    "calc": ("calc",),
    "probe": ("probe",),
    "report": ("report",),
    "serve": ("serve",),
    "compare": ("compare",),
    "diagnose": ("diagnose", "diagnose_ab"),
    "simulate": ("simulate",),
    "export": ("export",),
    "sweep": ("sweep",),
    "isolation": ("isolation",),
    "runs": ("runs",),
}
#: Every command module.
COMMAND_MODULES = tuple(module for modules in COMMANDS.values() for module in modules)


def register_all(app: typer.Typer, command: str | None = None) -> None:
    """Register every command on ``app``; with ``command`` (a name in ``COMMANDS``), that
    one only: a command's module imports what its flags need, and a run of one command
    need not import the other ten (~0.03 CPU-s). Any other name registers them all, for
    the help and the suggestions a misspelt name gets."""
    from prefillscope.examples import add_examples

    for name in COMMANDS.get(command or "", COMMAND_MODULES):
        importlib.import_module(f"prefillscope.commands.{name}").register(app)
    add_examples(app)
