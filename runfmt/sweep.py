"""``sweep.json``: the curve of a sweep, typed, with its version.

A sweep folder holds one run directory per load and ``sweep.json`` beside them: the axis
(``rate`` or ``concurrency``), the figure the curve rose by, where it saturated, its knee,
whether the search stopped early, and per point the load, its run folder, its status and
its figures (``achieved_rps``, ``offered_rps``, ``ttft_p99_s``, ``client_limited`` …:
``session.sweep.figures``), why it saturated (``saturation_cause``) and, for an SLA
search (``sweep --find``), ``search``: its bounds, each probe's verdict and the answer.
``session.sweep`` writes it through ``SweepResult``; ``compare SWEEP_A SWEEP_B`` and the
sweep views read it back through ``read_sweep``.

Format versions: 1 is every ``sweep.json`` written before ``format_version`` existed; 2
adds that key and nothing else. A newer one is refused with one line naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runfmt.names import SWEEP_JSON
from runfmt.rundir import RunDir
from runfmt.version import document_version
from workloads.errors import InputError

#: The ``format_version`` this version writes.
SWEEP_FORMAT_VERSION = 2
#: The status of a point whose run completed (``runfmt.runinfo``'s ``complete``).
COMPLETE = "complete"


@dataclass
class SweepPoint:
    """One run of the sweep and the figures of its curve."""

    value: float
    run_dir: str
    status: str
    figures: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "run_dir": self.run_dir, "status": self.status} | {
            k: v for k, v in self.figures.items()
        }

    def figure(self, key: str) -> float | None:
        """Figure ``key`` of this point, when it is a number."""
        value = self.figures.get(key)
        return float(value) if isinstance(value, int | float) else None

    @classmethod
    def from_dict(cls, doc: dict[str, Any], source: str) -> SweepPoint:
        try:
            value = float(doc["value"])
        except (KeyError, TypeError, ValueError):
            raise InputError(source, f"has a point without a load: {doc!r}") from None
        figures = {k: v for k, v in doc.items() if k not in ("value", "run_dir", "status")}
        return cls(value, str(doc.get("run_dir") or ""), str(doc.get("status") or ""), figures)


@dataclass
class SweepResult:
    """What a sweep found: its points, the figure it rose by, saturation and knee."""

    axis: str
    points: list[SweepPoint]
    figure: str
    saturated_at: float | None = None
    knee: float | None = None
    stopped_early: bool = False
    #: Why the sweep saturated where it did: ``served_below_offered`` (the server served
    #: less than the rate offered) or ``no_gain`` (the figure stopped rising); ``None``
    #: when it did not saturate.
    saturation_cause: str | None = None
    #: An SLA search's bounds, probes and answer (``sweep --find``), else ``None``.
    search: dict[str, Any] | None = None

    @property
    def completed(self) -> dict[float, SweepPoint]:
        """The points whose run completed, by load."""
        return {p.value: p for p in self.points if p.status == COMPLETE}

    def to_json(self) -> dict[str, Any]:
        """The ``sweep.json`` document."""
        return {
            "format_version": SWEEP_FORMAT_VERSION,
            "axis": self.axis,
            "figure": self.figure,
            "saturated_at": self.saturated_at,
            "knee": self.knee,
            "stopped_early": self.stopped_early,
            "saturation_cause": self.saturation_cause,
            "points": [p.to_dict() for p in self.points],
        } | ({"search": self.search} if self.search is not None else {})

    @classmethod
    def from_json(cls, doc: dict[str, Any], source: str = SWEEP_JSON) -> SweepResult:
        """A ``sweep.json`` of any version this one reads (``InputError`` naming ``source``
        for a newer one or one without an axis)."""
        document_version(doc, source, SWEEP_FORMAT_VERSION)
        axis = doc.get("axis")
        if not isinstance(axis, str) or not axis:
            raise InputError(
                source, "names no sweep axis", "give a folder `prefillscope sweep` wrote"
            )
        points = doc.get("points") if isinstance(doc.get("points"), list) else []
        return cls(
            axis=axis,
            points=[SweepPoint.from_dict(p, source) for p in points if isinstance(p, dict)],
            figure=str(doc.get("figure") or ""),
            saturated_at=_number(doc.get("saturated_at")),
            knee=_number(doc.get("knee")),
            stopped_early=bool(doc.get("stopped_early")),
            saturation_cause=_text(doc.get("saturation_cause")),
            search=doc.get("search") if isinstance(doc.get("search"), dict) else None,
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: Any) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, int | float) else value


def is_sweep(folder: Path) -> bool:
    """Whether ``folder`` is a sweep folder (it holds ``sweep.json``)."""
    return (folder / SWEEP_JSON).is_file()


def read_sweep(folder: Path) -> SweepResult | None:
    """``folder``'s ``sweep.json``, typed, or ``None`` when it is not a sweep folder
    (``InputError`` when it is unreadable or newer)."""
    if not is_sweep(folder):
        return None
    return SweepResult.from_json(RunDir(folder).read_json(SWEEP_JSON), str(folder / SWEEP_JSON))


def write_sweep(folder: Path, sweep: SweepResult) -> None:
    """Write ``sweep.json`` into ``folder`` (atomically, as every run document)."""
    RunDir(folder, create=True).write_json(SWEEP_JSON, sweep.to_json())
