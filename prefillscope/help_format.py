"""``--help`` at 80 columns with every flag name whole.

typer writes a flag's names in one cell joined by ``,`` (``--num-requests,--num-prompts``);
with no space to break at, rich cuts the cell with ``…`` on a narrow terminal, hiding the
very name a reader came for. ``names_one_per_line`` makes typer's help put each name of a
flag on its own line of that cell, folded (never cut) when long help squeezes the column.
It is installed only when help is printed (importing typer's rich help costs the start
of every other command).
"""

from __future__ import annotations

from typing import Any


class _OneNamePerLine:
    """typer's option highlighter, given a flag's joined names, breaks them after each
    comma; everything else it highlights as before."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def __call__(self, text: Any) -> Any:
        if not (isinstance(text, str) and text.startswith("-")):
            return self.base(text)
        shown = self.base(text.replace(",", ",\n"))
        shown.overflow = "fold"  # a name squeezed by long help wraps, never ends in "…"
        return shown


def names_one_per_line() -> None:
    """Install the line break into typer's rich help (once)."""
    from typer import rich_utils

    if not isinstance(rich_utils.highlighter, _OneNamePerLine):
        rich_utils.highlighter = _OneNamePerLine(rich_utils.highlighter)
        rich_utils.negative_highlighter = _OneNamePerLine(rich_utils.negative_highlighter)
