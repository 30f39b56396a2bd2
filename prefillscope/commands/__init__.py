"""Each command lives in its own module and registers itself on the app here."""

from __future__ import annotations

import importlib

import typer

#: Command modules, each exposing ``register(app)``.
COMMAND_MODULES = (
    "bench",
    "calc",
    "probe",
    "report",
    "serve",
    "compare",
    "diagnose",
    "diagnose_ab",
    "simulate",
    "export",
    "sweep",
    "isolation",
)


def register_all(app: typer.Typer) -> None:
    from prefillscope.examples import add_examples

    for name in COMMAND_MODULES:
        importlib.import_module(f"prefillscope.commands.{name}").register(app)
    add_examples(app)
