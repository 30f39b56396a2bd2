"""``prefillscope compare SWEEP_A SWEEP_B``: two sweep folders compared load by load.

Each load both sweeps ran is compared as two runs are (the same metrics, intervals and
gates); the sweeps' knees are set side by side. The comparison passes when every
compared point passes. A sweep folder against a single run is refused in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from runfmt.sweep import SweepResult, read_sweep
from workloads.errors import InputError


def sweep_points(folder: Path) -> tuple[SweepResult, dict[float, Path]] | None:
    """A sweep folder's ``sweep.json`` and its completed points' run folders by load."""
    doc = read_sweep(folder)
    if doc is None:
        return None
    return doc, {value: folder / p.run_dir for value, p in doc.completed.items()}


def compare_sweeps(
    base: Path, new: Path, compare_runs: Callable[[Path, Path], Any]
) -> tuple[dict[str, Any], list[tuple[str, Any]]] | None:
    """``None`` unless both are sweep folders; else (knees, [(point name, result)])."""
    a, b = sweep_points(base), sweep_points(new)
    if a is None and b is None:
        return None
    if a is None or b is None:
        which = new if b is None else base
        raise InputError(
            "NEW_RUN", f"{which} is not a sweep folder", "compare two sweeps or two runs"
        )
    (doc_a, points_a), (doc_b, points_b) = a, b
    if doc_a.axis != doc_b.axis:
        raise InputError("NEW_RUN", f"one sweep is over {doc_a.axis}, the other over {doc_b.axis}")
    shared = sorted(set(points_a) & set(points_b))
    if not shared:
        raise InputError(
            "NEW_RUN", "the two sweeps share no completed load", "sweep the same loads"
        )
    results = [
        (f"{doc_a.axis}-{value:g}", compare_runs(points_a[value], points_b[value]))
        for value in shared
    ]
    knees = {"axis": doc_a.axis, "base": doc_a.knee, "new": doc_b.knee}
    return knees, results


def knee_sentence(knees: dict[str, Any]) -> str:
    unit = "req/s" if knees["axis"] == "rate" else "users"

    def say(value: Any) -> str:
        return "none" if value is None else f"{value:g} {unit}"

    return f"knee: base {say(knees['base'])}, new {say(knees['new'])}"
