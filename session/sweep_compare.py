"""Two sweep folders compared load by load (``prefillscope compare SWEEP_A SWEEP_B``).

Each load both sweeps completed is compared as two runs are (``diagnose.compare``: the
same metrics, intervals and gates); the sweeps' knees are set side by side. The
comparison passes when every compared load passes (``runfmt.compareresult``'s
``SweepCompareDocument``, what every view of it reads). Two folders that are not both sweeps
are refused in one line, as are sweeps over different axes or with no completed load in
common. ``sweep.json`` is read through ``runfmt.sweep.read_sweep`` alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from diagnose.gate import CompareResult
from runfmt.codec import frozen_map
from runfmt.compareresult import SweepCompareDocument, SweepKnees
from runfmt.sweep import SweepResult, read_sweep
from session.sweep import point_name
from workloads.errors import InputError

#: Compares two run directories (BASE, NEW): ``diagnose.compare.compare_runs`` with its flags.
CompareRuns = Callable[[Path, Path], CompareResult]


@dataclass(frozen=True)
class SweepComparison:
    """The loads both sweeps completed, each compared, and the two knees."""

    axis: str
    knee_base: float | None
    knee_new: float | None
    #: (point name, e.g. ``rate-2``; its comparison), by load.
    points: list[tuple[str, CompareResult]]

    def knees(self) -> SweepKnees:
        return SweepKnees(self.axis, self.knee_base, self.knee_new)

    def document(self) -> SweepCompareDocument:
        """The comparison as ``compare --json`` writes it and every view reads it."""
        points = {name: result.document() for name, result in self.points}
        return SweepCompareDocument(self.knees(), frozen_map(points))


def sweep_points(folder: Path) -> tuple[SweepResult, dict[float, Path]] | None:
    """A sweep folder's ``sweep.json`` and its completed points' run folders by load."""
    doc = read_sweep(folder)
    if doc is None:
        return None
    return doc, {value: folder / p.run_dir for value, p in doc.completed.items()}


def compare_sweeps(base: Path, new: Path, compare_runs: CompareRuns) -> SweepComparison | None:
    """``None`` unless both are sweep folders; else every shared completed load compared."""
    a, b = sweep_points(base), sweep_points(new)
    if a is None and b is None:
        return None
    if a is None or b is None:
        which = new if b is None else base
        raise InputError(
            "NEW_RUN", f"{which} is not a sweep folder", "compare two sweeps or two runs"
        )
    (doc_a, points_a), (doc_b, points_b) = a, b
    axis = doc_a.axis
    if axis != doc_b.axis:
        raise InputError("NEW_RUN", f"one sweep is over {axis}, the other over {doc_b.axis}")
    shared = sorted(set(points_a) & set(points_b))
    if not shared:
        raise InputError(
            "NEW_RUN", "the two sweeps share no completed load", "sweep the same loads"
        )
    compared = [
        (point_name(axis, value), compare_runs(points_a[value], points_b[value]))
        for value in shared
    ]
    return SweepComparison(axis, doc_a.knee, doc_b.knee, compared)
