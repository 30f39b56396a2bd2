"""One timeline of a run: client events, server series and GPU samples on the run clock.

The diagnosis asks questions such as "what was the server's queue while these requests
waited for their first token?" or "did ITL rise in the windows where a long prompt was
being prefilled?". Those need every source on one axis, sliceable by time. All
timestamps already share the run's ``RunClock``, so this module only
gathers them: request lifecycles and chunks as events, the canonical server series
(``probes.normalise``) and GPU rows — and answers window queries over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from loadgen.records import Status
from probes.mapping import builtin_mapping, load_mapping
from probes.mapping_model import MetricMapping
from probes.normalise import ServerSeries
from runfmt.names import SERVER_METRICS_TABLE
from runfmt.run import Run
from runfmt.rundir import RunDir
from workloads.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pandas as pd

    from runfmt.columns import Columns

#: Request lifecycle columns of requests.parquet and the event kind each becomes.
LIFECYCLE = {
    "intended_s": "intended",
    "sent_s": "sent",
    "first_token_s": "first_token",
    "end_s": "end",
}
EVENT_COLUMNS = ["t_s", "kind", "request_id", "n_tokens", "ok"]


def client_events(requests: pd.DataFrame, chunks: pd.DataFrame) -> pd.DataFrame:
    """Every client event, time-ordered: each request's intended/sent/first token/end
    (``ok`` False on the end of a failed request) and every received chunk."""
    import pandas as pd

    frames = []
    if not requests.empty:
        ok = requests.get("status", pd.Series(Status.OK, index=requests.index)) == Status.OK
        for column, kind in LIFECYCLE.items():
            if column not in requests:
                continue
            times = pd.to_numeric(requests[column], errors="coerce")
            keep = times.notna()
            frames.append(
                pd.DataFrame(
                    {
                        "t_s": times[keep].astype(float),
                        "kind": kind,
                        "request_id": requests.loc[keep, "id"].astype(str),
                        "n_tokens": np.nan,
                        "ok": ok[keep].to_numpy(),
                    }
                )
            )
    if not chunks.empty:
        frames.append(
            pd.DataFrame(
                {
                    "t_s": chunks["t_s"].astype(float),
                    "kind": "chunk",
                    "request_id": chunks["request_id"].astype(str),
                    "n_tokens": chunks["n_tokens"].astype(float),
                    "ok": True,
                }
            )
        )
    if not frames:
        return pd.DataFrame(columns=EVENT_COLUMNS)
    events = pd.concat(frames, ignore_index=True)
    return events.sort_values("t_s", kind="stable").reset_index(drop=True)[EVENT_COLUMNS]


def _run(run: Run | RunDir | str) -> Run:
    return run if isinstance(run, Run) else Run.at(run)


def run_mapping(run: Run | RunDir) -> MetricMapping | None:
    """The mapping the run's probe used, as recorded in ``run.json``
    (``probes.server_metrics.mapping_file`` or ``.flavour``); None → detect from data."""
    info = _run(run).info
    if info is None:
        return None
    settings = info.probes.server_metrics
    if settings is None:
        return None
    if settings.mapping_file:
        return load_mapping(settings.mapping_file)
    return builtin_mapping(settings.flavour) if settings.flavour else None


def server_series(run: Run | RunDir, mapping: MetricMapping | None = None) -> ServerSeries | None:
    """The run's canonical server series, or None when no server metrics were recorded
    or none could be understood (no known flavour and no mapping)."""
    run = _run(run)
    tables = run.tables

    def parts() -> Iterator[Columns]:  # numpy (no pandas), a part at a time (no table whole)
        return tables.parts(SERVER_METRICS_TABLE)

    # a table that cannot be read is refused (InputError) as a whole read refuses it
    if next((part for part in parts() if len(part)), None) is None:
        return None
    try:
        return ServerSeries.from_parts(parts, mapping or run_mapping(run))
    except InputError:
        return None


@dataclass
class Timeline:
    events: pd.DataFrame
    server: ServerSeries | None
    gpu: pd.DataFrame

    @classmethod
    def from_run(cls, run: Run | RunDir | str, mapping: MetricMapping | None = None) -> Timeline:
        run = _run(run)
        tables = run.tables
        return cls(
            client_events(tables.requests, tables.chunks),
            server_series(run, mapping),
            tables.gpu,
        )

    @property
    def span(self) -> tuple[float, float] | None:
        """First and last timestamp of anything recorded."""
        times = [self.events["t_s"].to_numpy(dtype=float)]
        if self.server is not None:
            times.append(self.server.t_s)
        if not self.gpu.empty:
            times.append(self.gpu["t_s"].to_numpy(dtype=float))
        every = np.concatenate(times) if times else np.array([])
        every = every[np.isfinite(every)]
        return (float(every.min()), float(every.max())) if every.size else None

    def window(self, start: float, end: float) -> Timeline:
        """Everything in [start, end] (the server keeps its baseline scrape before start,
        so counter increases over the window stay exact)."""
        events = self.events[(self.events["t_s"] >= start) & (self.events["t_s"] <= end)]
        gpu = self.gpu
        if not gpu.empty:
            gpu = gpu[(gpu["t_s"] >= start) & (gpu["t_s"] <= end)]
        server = self.server.window(start, end) if self.server is not None else None
        return Timeline(events.reset_index(drop=True), server, gpu.reset_index(drop=True))

    def in_flight(self, times: np.ndarray) -> np.ndarray:
        """Requests sent and not yet ended at each time."""
        sent = np.sort(self.events.loc[self.events["kind"] == "sent", "t_s"].to_numpy(float))
        ended = np.sort(self.events.loc[self.events["kind"] == "end", "t_s"].to_numpy(float))
        times = np.asarray(times, dtype=float)
        started = np.searchsorted(sent, times, side="right")
        return started - np.searchsorted(ended, times, side="right")

    def bins(self, width_s: float) -> pd.DataFrame:
        """One row per window of ``width_s`` over the whole span: client counts (sent,
        completed, failed, tokens received, mean in flight), the server's windows
        (``ServerSeries.window_stats``) and GPU means — one table to correlate them."""
        import pandas as pd

        span = self.span
        if span is None or width_s <= 0:
            return pd.DataFrame()
        count = max(1, int(np.ceil((span[1] - span[0]) / width_s)))
        rows = []
        for k in range(count):
            lo, hi = span[0] + k * width_s, span[0] + (k + 1) * width_s
            t = self.events["t_s"]
            last = k == count - 1  # the last window closes on the span's end
            ev = self.events[(t >= lo) & ((t < hi) | (last & (t <= hi)))]
            ends = ev[ev["kind"] == "end"]
            rows.append(
                {
                    "t_start": float(lo),
                    "t_end": float(hi),
                    "sent": int((ev["kind"] == "sent").sum()),
                    "completed": int(ends["ok"].astype(bool).sum()),
                    "failed": int((~ends["ok"].astype(bool)).sum()),
                    "tokens": float(ev.loc[ev["kind"] == "chunk", "n_tokens"].sum()),
                    "in_flight_mean": float(self.in_flight(np.linspace(lo, hi, 5)).mean()),
                    **self._gpu_means(lo, hi),
                    **(self.server.window_stats(lo, hi) if self.server is not None else {}),
                }
            )
        return pd.DataFrame(rows)

    def _gpu_means(self, lo: float, hi: float) -> dict[str, float | None]:
        if self.gpu.empty:
            return {"gpu_utilisation_pct": None, "gpu_memory_used_bytes": None}
        rows = self.gpu[(self.gpu["t_s"] >= lo) & (self.gpu["t_s"] < hi)]
        if rows.empty:
            return {"gpu_utilisation_pct": None, "gpu_memory_used_bytes": None}
        per_sample = rows.groupby("t_s")
        return {
            "gpu_utilisation_pct": float(per_sample["utilisation_pct"].mean().mean()),
            "gpu_memory_used_bytes": float(per_sample["memory_used_bytes"].sum().mean()),
        }
