"""A JSON document flattened to its leaves by path, for tests that compare documents key
by key (a written-back document with the fixture it was read from)."""

from __future__ import annotations

from typing import Any


def leaf_paths(doc: Any, at: str = "") -> dict[str, Any]:
    """Every leaf of a JSON document by its path (``/configurations[0]/ttft_s/p99``); an
    empty object or array is a leaf of its own (``{}``, ``[]``)."""
    if isinstance(doc, dict):
        out: dict[str, Any] = {at or "/": {}} if not doc else {}
        for key, value in doc.items():
            out |= leaf_paths(value, f"{at}/{key}")
        return out
    if isinstance(doc, list):
        out = {at: []} if not doc else {}
        for i, value in enumerate(doc):
            out |= leaf_paths(value, f"{at}[{i}]")
        return out
    return {at: doc}
