"""One run directory, opened once: its documents typed, its tables, its workload spec.

``open_run(path)`` is how every reader of a finished (or interrupted) run starts:
``diagnose``, ``report``, ``compare``, ``export``, ``simulate --calibrate``. It refuses a
folder that is no run in one line, reads ``run.json`` (``RunInfo``), ``summary.json``
(``Summary``) and ``diagnosis.json`` (``Diagnosis``) where the run has them, each through
the one version check (``runfmt.version.document_version``: a newer format is one line
naming the file, exit status 2), and hands back a ``Run``. Its ``tables`` are the run's
one ``RunTables``; its ``spec`` is the workload ``run.json`` recorded, rebuilt by
``runfmt.run_workload.WorkloadSection.spec``, or ``None`` with the reason it could not be
(``spec_problem``): a reader that needs the plan refuses with that reason
(``require_spec``), never falls back to another.

``Run.at(path)`` is the same run before anything is read, for the writers' own reads
while a run is going on (the probes' events, the summary at the end): a document is
then read, and checked, when first asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from runfmt.diagnosis import Diagnosis
from runfmt.names import DIAGNOSIS_JSON, REQUESTS_TABLE, RUN_JSON, SUMMARY_JSON
from runfmt.rundir import RunDir
from runfmt.runinfo import RunInfo
from runfmt.summary import Summary
from runfmt.tables import RunTables
from workloads.errors import InputError

if TYPE_CHECKING:
    from workloads.spec import WorkloadSpec

#: How to give a run, for the one-line errors.
FIX_RUN_DIR = "pass the folder a `prefillscope bench --out DIR` run wrote"


@dataclass(eq=False)
class Run:
    """A run directory and what it holds, each read once (see the module docstring)."""

    dir: RunDir
    #: Whether the run may still be written: its tables are read again at every ask.
    live: bool = True

    @classmethod
    def at(cls, path: str | Path | RunDir, *, live: bool = True) -> Run:
        """The run at ``path``, nothing read yet (``FileNotFoundError`` without a folder)."""
        return cls(path if isinstance(path, RunDir) else RunDir(path), live)

    @property
    def path(self) -> Path:
        return self.dir.path

    @cached_property
    def tables(self) -> RunTables:
        recorded = None if self.live else self._recorded_requests
        return RunTables(self.dir, keep=not self.live, recorded=recorded)

    def _recorded_requests(self) -> tuple[int, str] | None:
        """The rows ``summary.json`` counts in the requests table (measured and warm-up)
        and the file's name; ``None`` without a summary that counts them."""
        section = self.summary.requests if self.summary is not None else None
        if section is None or section.total is None:
            return None
        return section.total + (section.warmup_excluded or 0), SUMMARY_JSON

    @cached_property
    def info(self) -> RunInfo | None:
        """``run.json``, typed; ``None`` when the run has none (killed before it wrote one)."""
        if not self.dir.has(RUN_JSON):
            return None
        return RunInfo.from_json(self.dir.read_json(RUN_JSON), self._source(RUN_JSON))

    @cached_property
    def summary(self) -> Summary | None:
        """``summary.json``, typed; ``None`` when the run wrote none (interrupted)."""
        if not self.dir.has(SUMMARY_JSON):
            return None
        return Summary.from_json(self.dir.read_json(SUMMARY_JSON), self._source(SUMMARY_JSON))

    @cached_property
    def diagnosis(self) -> Diagnosis | None:
        """``diagnosis.json``, typed; ``None`` when the run was not diagnosed."""
        if not self.dir.has(DIAGNOSIS_JSON):
            return None
        doc = self.dir.read_json(DIAGNOSIS_JSON)
        return Diagnosis.from_json(doc, self._source(DIAGNOSIS_JSON))

    @property
    def status(self) -> str:
        """The run's status (``complete``, ``interrupted`` …), ``unknown`` without run.json."""
        return self.info.status if self.info is not None else "unknown"

    @cached_property
    def _spec(self) -> tuple[WorkloadSpec | None, str | None]:
        source = self._source(RUN_JSON)
        if self.info is None:
            return None, f"{self.path} has no {RUN_JSON}"
        if not self.info.workload.recorded:
            return None, f"{source} records no workload spec"
        try:
            return self.info.workload.spec(), None
        except InputError as exc:
            return None, f"{source}: its workload spec cannot be rebuilt ({exc})"

    @property
    def spec(self) -> WorkloadSpec | None:
        """The workload ``run.json`` recorded, rebuilt; ``None`` when it cannot be."""
        return self._spec[0]

    @property
    def spec_problem(self) -> str | None:
        """Why ``spec`` is ``None`` (``None`` when it is not)."""
        return self._spec[1]

    def require_spec(self, argument: str) -> WorkloadSpec:
        """The spec, or an ``InputError`` for ``argument`` with the reason it is not there."""
        spec, problem = self._spec
        if spec is None:
            raise InputError(argument, str(problem), "give a run whose workload this version reads")
        return spec

    def require_info(self, argument: str) -> RunInfo:
        """``run.json``, or an ``InputError`` for ``argument`` saying the run has none."""
        if self.info is None:
            raise InputError(argument, f"{self.path} has no {RUN_JSON}", FIX_RUN_DIR)
        return self.info

    def _source(self, name: str) -> str:
        return str(self.path / name)


def open_run(path: str | Path, argument: str = "RUN_DIR") -> Run:
    """The run directory at ``path``, its documents read and their versions checked.

    ``InputError`` for ``argument`` (the flag or argument that gave ``path``) when there is
    no folder, or the folder holds neither ``run.json`` nor a requests table; naming the
    file when a document is unreadable or of a newer format.
    """
    try:
        run = Run.at(path, live=False)
    except FileNotFoundError:
        raise InputError(argument, f"no run directory at {path}", FIX_RUN_DIR) from None
    if not run.dir.has(RUN_JSON) and not run.tables.has(REQUESTS_TABLE):
        raise InputError(
            argument, f"{path} holds no run (no {RUN_JSON}, no requests table)", FIX_RUN_DIR
        )
    run.info, run.summary, run.diagnosis  # noqa: B018 - read (and checked) now, once
    return run
