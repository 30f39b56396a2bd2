"""The ``diagnose`` command group, on which ``commands.diagnose`` puts its run form (the
hidden ``run``) and ``commands.diagnose_ab`` its ``ab``: a module of its own, so that no
command imports another.
"""

from __future__ import annotations

import typer
from typer.core import TyperGroup

#: The sub-command that takes a run directory; its name may be left out.
RUN_COMMAND = "run"


class DiagnoseGroup(TyperGroup):
    """A group whose default sub-command is ``run``: ``diagnose RUN_DIR`` works as is."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [RUN_COMMAND, *args]
        return super().parse_args(ctx, args)


diagnose_app = typer.Typer(
    cls=DiagnoseGroup,
    name="diagnose",
    help=(
        "Diagnose a run: `prefillscope diagnose RUN_DIR [OPTIONS]` judges each hypothesis "
        "for a bad latency (prefill chunks, host overhead, KV bandwidth, pool exhaustion, "
        "overload, a client that could not keep up) and the prefix cache, names the primary "
        "finding with its confidence, and decides: contain now or measure first. Its "
        "options (--slo, --model, --gpu, --json …): `prefillscope diagnose run --help`."
    ),
    no_args_is_help=True,
    subcommand_metavar="RUN_DIR [OPTIONS] | COMMAND [ARGS]...",
)
