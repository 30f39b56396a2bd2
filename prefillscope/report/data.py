"""What a report needs from a run directory, loaded once and shaped for plotting.

The report is read-only over the run directory (``docs/ARCHITECTURE.md``) and must cope with any
run: an interrupted one (journals, no summary), one against a server that exposed no KV
pool, one that was never diagnosed. Whatever is absent is recorded in ``notes`` so the
page says so instead of drawing a misleading empty or zero plot. The run is opened once
(``runfmt.run.open_run``): its documents typed and version-checked, its tables read once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from probes.canonical import POOL_BUCKETS, Provenance
from probes.latency import summarize_frames
from probes.metric_formulas import per_request_formula
from probes.timeline import server_series
from probes.token_gaps import TokenGaps, token_gaps
from runfmt.diagnosis import Diagnosis
from runfmt.metrics import TTFT
from runfmt.names import DIAGNOSIS_JSON, RUN_JSON, SERVER_METRICS_TABLE
from runfmt.run import Run, open_run
from runfmt.runinfo import RunInfo
from runfmt.summary import Summary
from runfmt.tables import completed_mask, measured_rows

if TYPE_CHECKING:  # pandas is imported by the loads, not with the module: a bench's
    import pandas as pd  # end-of-run view imports this module and needs no DataFrame

#: A prompt this many times the run's median length counts as a long-prompt arrival.
LONG_PROMPT_FACTOR = 4.0

#: The layer standing for blocks a server reports only as "not active".
UNSPLIT_LAYER = "reclaimable or free"


@dataclass
class PoolLayer:
    """One bucket of the KV block pool over time, with where its numbers came from."""

    name: str
    values: np.ndarray
    provenance: str  # measured | derived | unknown
    source: str | None  # the series it was read or derived from, or why it is unknown


@dataclass
class PoolTimeline:
    """The KV pool's buckets on the run clock, bottom-up as they are stacked."""

    t_s: np.ndarray
    layers: list[PoolLayer]
    unit: str  # "blocks" or "tokens"
    flavour: str


@dataclass
class ReportData:
    """Everything one report shows, read from one run directory."""

    path: Path
    run: Run
    #: ``summary.json`` as it was read, or the summary recomputed from the tables when
    #: the run wrote none.
    summary: Summary | None
    requests: pd.DataFrame
    gaps: TokenGaps
    gap_kinds: np.ndarray  # the request kind of each gap in ``gaps``
    pool: PoolTimeline | None
    diagnosis: Diagnosis | None
    notes: list[str] = field(default_factory=list)

    @property
    def info(self) -> RunInfo | None:
        """``run.json``, typed; ``None`` when the run has none."""
        return self.run.info

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def sections(self) -> Summary:
        """``summary``, every section empty when there is none."""
        return self.summary or Summary()


def load_report_data(path: str | Path) -> ReportData:
    """Read a run directory (``runfmt.run.open_run``): ``InputError`` when it is not one,
    or a document of it is unreadable or of a newer format."""
    import pandas as pd

    run = open_run(path)
    notes: list[str] = []
    if run.info is None:
        notes.append(f"{RUN_JSON} is missing: target and workload are unknown")
    tables = run.tables
    raw_requests, chunks = tables.requests, tables.chunks
    summary = run.summary
    if summary is None and not raw_requests.empty:
        summary = summarize_frames(raw_requests, chunks, tables.client)
        notes.append("summary.json is absent: the summary was recomputed from the tables")
    requests = report_requests(raw_requests)
    done = requests.loc[requests["ok"], "id"] if len(requests) else pd.Series([], dtype=object)
    gaps = token_gaps(chunks, done)
    if gaps.gap_s.size == 0:
        notes.append("no per-token timings (chunks table empty or absent): ITL plots are empty")
    pool = pool_timeline(run, notes)
    notes += probe_problems(run.info)
    if run.diagnosis is None:
        notes.append(f"{DIAGNOSIS_JSON} is absent: the diagnosis was not run")
    return ReportData(
        run.path,
        run,
        summary,
        requests,
        gaps,
        gap_kinds(gaps, requests),
        pool,
        run.diagnosis,
        notes,
    )


def probe_problems(info: RunInfo | None) -> list[str]:
    """A line for each probe of the run that did not work, with the reason it recorded."""
    lines = []
    for probe in info.probes if info is not None else ():
        status = probe.status
        if not status.worked:
            reason = f": {status.reason}" if status.reason else ""
            lines.append(f"the {probe.name.replace('_', ' ')} probe was {status.state}{reason}")
    return lines


# -- requests ----------------------------------------------------------------------------
def report_requests(df: pd.DataFrame) -> pd.DataFrame:
    """Requests that count (warm-up excluded) with ``ok``, ``ttft_s`` and ``long_prompt``."""
    import pandas as pd

    columns = [
        "id",
        "kind",
        "sent_s",
        "prompt_tokens",
        "cached_tokens",
        "expected_cached_tokens",
        "ok",
        TTFT.key,
        "long_prompt",
    ]
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    df = measured_rows(df).copy()
    ttft = per_request_formula(TTFT)
    for col in [*columns[2:6], *ttft.inputs]:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df else np.nan
    df["id"] = df["id"].astype(str)
    df["kind"] = df["kind"].fillna("request").astype(str) if "kind" in df else "request"
    df["ok"] = completed_mask(df)
    df[TTFT.key] = ttft.values(df)
    df["long_prompt"] = long_prompt_mask(df)
    return df.reset_index(drop=True)


def long_prompt_mask(df: pd.DataFrame) -> pd.Series:
    """Requests whose kind names a long prompt, or whose prompt is far above the median."""
    import pandas as pd

    by_kind = df["kind"].str.contains("long", case=False, na=False)
    prompts = df["prompt_tokens"]
    median = prompts.median()
    by_length = prompts >= LONG_PROMPT_FACTOR * median if pd.notna(median) and median > 0 else False
    return by_kind | by_length


def long_prompt_arrivals(requests: pd.DataFrame) -> np.ndarray:
    """Send times of long-prompt requests: where decodes may stall behind a prefill."""
    rows = requests[requests["long_prompt"]]
    return rows["sent_s"].dropna().to_numpy(dtype=float)


# -- per-token gaps ----------------------------------------------------------------------
def gap_kinds(gaps: TokenGaps, requests: pd.DataFrame) -> np.ndarray:
    """The request kind of each per-token gap (``"request"`` when the run has no kinds)."""
    import pandas as pd

    if gaps.gap_s.size == 0:
        return np.array([], dtype=object)
    kinds = requests.drop_duplicates("id").set_index("id")["kind"]
    per_request = kinds.reindex(pd.Index(gaps.request_ids).astype(str)).fillna("request")
    return per_request.to_numpy(dtype=object)[gaps.request]


# -- server metrics → KV pool ------------------------------------------------------------
def pool_timeline(run: Run, notes: list[str]) -> PoolTimeline | None:
    """The KV pool's buckets over time, as ``probes.timeline`` reads the server's samples.

    Buckets the server exposes are layers with their provenance. When it says only how
    much is active (vLLM), the rest of the pool is free *or* reclaimable and nobody can
    say which: it becomes one ``unknown`` layer, never split and never counted as free.
    """
    series = server_series(run)
    if series is None:
        recorded = run.tables.has(SERVER_METRICS_TABLE)
        what = (
            "the server metrics are in no known flavour or mapping"
            if recorded
            else "no server metrics were recorded"
        )
        notes.append(f"{what}: the KV pool is unknown")
        return None
    frame, provenance, sources = series.frame, series.provenance, series.sources
    known = {
        name: np.asarray(frame[f"pool_{name}"], dtype=float)
        for name in (*POOL_BUCKETS, "total")
        if np.isfinite(np.asarray(frame[f"pool_{name}"], dtype=float)).any()
    }
    if "active" not in known:
        notes.append(f"the {series.flavour} server does not expose its KV pool: it is unknown")
        return None
    layers = [
        PoolLayer(name, known[name], str(provenance[f"pool_{name}"]), sources[f"pool_{name}"])
        for name in POOL_BUCKETS
        if name in known
    ]
    if len(layers) == 1 and "total" in known:
        layers.append(
            PoolLayer(
                UNSPLIT_LAYER,
                known["total"] - known["active"],
                str(Provenance.UNKNOWN),
                sources["pool_reclaimable"],
            )
        )
    return PoolTimeline(
        np.asarray(frame["t_s"], dtype=float), layers, series.pool_unit, series.flavour
    )
