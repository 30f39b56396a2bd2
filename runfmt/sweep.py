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

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runfmt.codec import ABSENT, EMPTY, decode, encode, frozen_map, key
from runfmt.names import SWEEP_JSON
from runfmt.rundir import RunDir
from runfmt.sweep_search import SearchSection
from runfmt.version import document_version
from workloads.errors import InputError

#: The ``format_version`` this version writes.
SWEEP_FORMAT_VERSION = 2
#: The status of a point whose run completed (``runfmt.runinfo``'s ``complete``).
COMPLETE = "complete"
#: A point's request-rate figures (besides each latency's ``runfmt.metrics.json_name``):
#: completed requests per second of the measured window, completions per second from the
#: first to the last end, the plan's intended sends per second, and, under an SLO, the
#: goodput and the share of requests within it.
ACHIEVED_RPS, SERVED_RPS, OFFERED_RPS = "achieved_rps", "served_rps", "offered_rps"
GOODPUT_RPS, GOODPUT_SHARE = "goodput_rps", "goodput_share"


@dataclass(frozen=True)
class SweepPoint:
    """One run of the sweep and the figures of its curve: every key of the point but its
    load, run folder and status is a figure (``session.sweep.figures``), kept in
    ``extra`` by the codec and written back beside them."""

    value: float = 0.0
    run_dir: str = ""
    status: str = ""
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    @property
    def figures(self) -> Mapping[str, Any]:
        """The point's figures by key (``achieved_rps``, ``ttft_p99_s`` …)."""
        return {k: v for k, v in self.extra.items() if v is not ABSENT}

    def figure(self, key: str) -> float | None:
        """Figure ``key`` of this point, when it is a number."""
        value = self.figures.get(key)
        return float(value) if isinstance(value, int | float) else None


def sweep_point(value: float, run_dir: str, status: str, figures: Mapping[str, Any]) -> SweepPoint:
    """A point of the curve with its ``figures``."""
    return SweepPoint(value, run_dir, status, frozen_map(figures))


@dataclass(frozen=True)
class SweepResult:
    """What a sweep found: the figure it rose by, saturation and knee, its points."""

    axis: str = ""
    figure: str = ""
    saturated_at: float | None = None
    knee: float | None = None
    stopped_early: bool = False
    #: Why the sweep saturated where it did: ``served_below_offered`` (the server served
    #: less than the rate offered) or ``no_gain`` (the figure stopped rising); ``None``
    #: when it did not saturate.
    saturation_cause: str | None = None
    points: tuple[SweepPoint, ...] = ()
    #: An SLA search's bounds, probes and answer (``sweep --find``), else absent.
    search: SearchSection | None = key(omit_none=True, default=None)  # noqa: RUF009
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    @property
    def completed(self) -> dict[float, SweepPoint]:
        """The points whose run completed, by load."""
        return {p.value: p for p in self.points if p.status == COMPLETE}

    def to_json(self) -> dict[str, Any]:
        """The ``sweep.json`` document."""
        return {"format_version": SWEEP_FORMAT_VERSION} | encode(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any], source: str = SWEEP_JSON) -> SweepResult:
        """A ``sweep.json`` of any version this one reads (``InputError`` naming ``source``
        for a newer one, one without an axis or a point without a load)."""
        document_version(doc, source, SWEEP_FORMAT_VERSION)
        read = decode(cls, doc)
        if not read.axis:
            raise InputError(
                source, "names no sweep axis", "give a folder `prefillscope sweep` wrote"
            )
        for raw, typed in zip(doc.get("points") or [], read.points, strict=False):
            if "value" in typed.extra:  # absent, or not a number
                raise InputError(source, f"has a point without a load: {raw!r}")
        extra = {k: v for k, v in read.extra.items() if k != "format_version"}
        return replace(read, extra=frozen_map(extra))


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
