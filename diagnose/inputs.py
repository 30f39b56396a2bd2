"""What a diagnosis reads from a run directory, loaded once and shared by every check.

A run directory may be complete, interrupted (the server died: the journals hold every
request that finished) or from a server that exposes little (vLLM has no step metrics,
llama.cpp no histograms). Everything here is therefore optional: a missing table is
an empty frame, a missing series ``None``, and the checks say what they lacked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from probes.normalise import ServerSeries
from probes.timeline import server_series
from runfmt.run import Run, open_run
from runfmt.run_sections import TargetSection
from runfmt.runinfo import RunInfo
from runfmt.tables import completed_mask, measured_rows
from workloads.spec import WorkloadSpec


@dataclass
class RunView:
    """One run's files as frames: ``requests`` are the measured ones (no warm-up),
    ``every_request`` all that were sent, warm-ups included (they filled the cache too).
    ``info`` is ``run.json`` (empty sections when the run has none)."""

    path: Path
    run: Run
    info: RunInfo
    requests: pd.DataFrame
    every_request: pd.DataFrame
    chunks: pd.DataFrame
    server: ServerSeries | None
    gpu: pd.DataFrame
    #: The load generator's own health samples (event-loop lag, CPU share); may be empty.
    client: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def target(self) -> TargetSection:
        return self.info.target

    @property
    def spec(self) -> WorkloadSpec | None:
        """The run's workload, rebuilt from ``run.json`` (``None``: ``run.spec_problem``)."""
        return self.run.spec

    @property
    def engine(self) -> dict[str, Any] | None:
        """The embedded engine's configuration, when the run drove it."""
        return self.target.engine

    @property
    def completed(self) -> pd.DataFrame:
        return self.requests[completed_mask(self.requests)]

    def column(self, name: str, frame: pd.DataFrame | None = None) -> np.ndarray:
        """A numeric column as floats; NaN where null or absent (unknown, not 0)."""
        df = self.requests if frame is None else frame
        if name not in df.columns:
            return np.full(len(df), np.nan)
        return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float)

    def fresh_tokens(self, frame: pd.DataFrame | None = None) -> np.ndarray:
        """Prompt tokens each request had to compute: prompt − cached (server-reported,
        else the oracle's expectation, else none cached)."""
        cached = self.column("cached_tokens", frame)
        expected = self.column("expected_cached_tokens", frame)
        cached = np.where(np.isfinite(cached), cached, np.nan_to_num(expected))
        return np.maximum(self.column("prompt_tokens", frame) - cached, 0.0)


def load_run_view(path: str | Path) -> RunView:
    """Read a run directory (``runfmt.run.open_run``: ``InputError`` for ``RUN_DIR`` when
    it is not one, naming the file when a document is unreadable or newer)."""
    run = open_run(path)
    tables = run.tables  # a table with no rows comes with its schema's columns
    requests = tables.requests
    return RunView(
        path=run.path,
        run=run,
        info=run.info or RunInfo.from_json({}),
        requests=measured_rows(requests).reset_index(drop=True),
        every_request=requests,
        chunks=tables.chunks,
        server=server_series(run.dir),
        gpu=tables.gpu,
        client=tables.client,
    )
