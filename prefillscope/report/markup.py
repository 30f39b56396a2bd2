"""A tiny HTML/SVG element builder that escapes by default.

Reports embed strings that came from servers and run files (model names, error messages,
metric labels). Building markup with f-strings makes it easy to forget one ``escape``;
here every text child and attribute value is escaped unless it is already ``Markup``
(a fragment this package built), so forgetting is the safe direction.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import TypeAlias


class Markup(str):
    """A string of markup we produced ourselves; inserted verbatim."""

    __slots__ = ()


Child: TypeAlias = "Markup | str | int | float | Iterable[Child] | None"


def escape(text: object) -> Markup:
    """Escape any value for use as HTML text or a quoted attribute value."""
    if isinstance(text, Markup):
        return text
    return Markup(html.escape(str(text), quote=True))


def _render_children(children: Iterable[Child]) -> str:
    parts: list[str] = []
    for child in children:
        if child is None:
            continue
        if isinstance(child, str | int | float):
            parts.append(escape(child))
        else:
            parts.append(_render_children(child))
    return "".join(parts)


def _attr_name(name: str) -> str:
    """Python keywords and dashes: ``class_`` → ``class``, ``stroke_width`` → ``stroke-width``."""
    return name.rstrip("_").replace("_", "-")


def _render_attrs(attrs: dict[str, object]) -> str:
    out = []
    for name, value in attrs.items():
        if value is None or value is False:
            continue
        if isinstance(value, float):
            value = fmt_num(value)
        out.append(f' {_attr_name(name)}="{escape(value)}"')
    return "".join(out)


def el(tag: str, *children: Child, **attrs: object) -> Markup:
    """One element: ``el("td", "text", class_="num")``. Children and attributes are escaped."""
    body = _render_children(children)
    return Markup(f"<{tag}{_render_attrs(attrs)}>{body}</{tag}>")


def void(tag: str, **attrs: object) -> Markup:
    """A self-closing element (SVG shapes, ``<meta>``)."""
    return Markup(f"<{tag}{_render_attrs(attrs)}/>")


def join(children: Iterable[Child]) -> Markup:
    """Several fragments (and escaped strings) as one fragment."""
    return Markup(_render_children(children))


def fmt_num(value: float) -> str:
    """Short coordinates for SVG: two decimals are sub-pixel, more is just bytes."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text
