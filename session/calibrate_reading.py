"""What ``simulate --calibrate`` reads of a run: its requests' TTFTs, token gaps and spans,
the server's own figures, and whether the client shaped the run.

Conventions (what every figure of the fit is measured from):

* **TTFT from the actual send.** The replay starts each request when the client really
  sent it (``sent_s``), so its TTFT is compared with the client's TTFT from the actual
  send (``ttft_sent_s``), never the intended one: a client that fell behind its schedule
  adds its dispatch lag to the intended TTFT, which no server setting explains.
* **The server's clock where it has one.** The server's TTFT histogram (the canonical
  ``ttft`` series, whichever name the flavour's mapping reads) gives the mean TTFT from
  the server's arrival, exactly (sum ÷ count). When it counted the run's requests, the
  difference from the client's mean is the **transport** (HTTP, the front end's hop to
  the engine, the stream's delivery): a constant the fit adds to every replayed TTFT
  rather than a slower prefill. The canonical ``itl`` histogram (vLLM's
  ``inter_token_latency_seconds`` or its older ``time_per_output_token_seconds``) gives
  the mean gap. The embedded engine's step histogram gives the mean step of each kind:
  pure decode, and those carrying prompt chunks (prefill only and mixed), on its clock.
* **Client limits.** A run whose summary says the client was limited (dispatch lag p99
  or CPU share over the thresholds of ``probes.client_limits``) is fitted all the same
  (from the actual sends), with a warning naming why and how large the lag was next to
  the TTFT it would have distorted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from probes.latency import request_latencies
from probes.token_gaps import TokenGaps, token_gaps
from runfmt.calibration import FitFigures
from runfmt.metrics import ITL, TTFT_SENT, stat_name
from runfmt.run import Run
from runfmt.series import Hist, step_time, step_tokens
from runtime.quantiles import quantiles
from session.calibrate_decode import RequestSpans, request_spans
from workloads.errors import InputError

#: Step kinds that carry prompt chunks.
CHUNK_KINDS = ("prefill", "mixed")
#: The server's own mean ITL, as the measured figures name it.
ITL_MEAN = stat_name(ITL, "mean")


@dataclass(frozen=True)
class ServerFigures:
    """What the server's clock says over the run (``None``: not exposed)."""

    ttft_mean: float | None = None
    ttft_count: int = 0
    itl_mean: float | None = None
    itl_source: str | None = None
    decode_step_mean: float | None = None
    #: The server metric the decode steps were read from (``…step_seconds{kind="decode"}``).
    decode_step_source: str | None = None
    chunk_step_mean: float | None = None
    chunk_token_s: float | None = None


@dataclass(frozen=True)
class RunReading:
    """What calibration reads of a run: per completed request its id and TTFT from the
    actual send, their gaps, the spans the decode fit needs, the server's figures and
    the client's health."""

    request_ids: np.ndarray
    ttft_s: np.ndarray
    gaps: TokenGaps
    spans: RequestSpans
    server: ServerFigures
    #: Why the summary says the client was limited (empty: it was not, or it does not say).
    client_limits: tuple[str, ...]
    dispatch_lag_p99_s: float | None

    @property
    def transport_s(self) -> float:
        """Client TTFT − server TTFT, mean, when the server counted exactly these
        requests (0 otherwise): what the client adds to the server's TTFT."""
        server = self.server
        if server.ttft_mean is None or server.ttft_count != len(self.ttft_s):
            return 0.0
        return max(0.0, float(np.mean(self.ttft_s)) - server.ttft_mean)


def _server_figures(run: Run) -> ServerFigures:
    """The server's canonical TTFT and ITL histograms and the embedded engine's steps."""
    from probes.timeline import server_series

    try:
        series = server_series(run)
    except (OSError, ValueError, KeyError):
        return ServerFigures()
    if series is None:
        return ServerFigures()
    figures: dict[str, object] = {}
    ttft, itl = series.histogram_increase(Hist.TTFT), series.histogram_increase(Hist.ITL)
    if ttft is not None and ttft.count:
        figures |= dict(ttft_mean=ttft.mean, ttft_count=int(ttft.count))  # ServerFigures
    if itl is not None and itl.count and itl.sum > 0:
        figures |= dict(itl_mean=itl.mean, itl_source=series.sources.get(Hist.ITL))
    steps = {k: series.histogram_increase(step_time(k)) for k in ("decode", *CHUNK_KINDS)}
    decode = steps["decode"]
    if decode is not None and decode.count and decode.sum > 0:
        figures["decode_step_mean"] = decode.sum / decode.count
        figures["decode_step_source"] = series.sources.get(Hist.STEP_TIME_DECODE)
    chunk = [steps[k] for k in CHUNK_KINDS if steps[k] is not None and steps[k].count]
    if chunk:
        seconds = sum(h.sum for h in chunk)
        figures["chunk_step_mean"] = seconds / sum(h.count for h in chunk)
        tokens = [series.histogram_increase(step_tokens(k)) for k in CHUNK_KINDS]
        scheduled = sum(h.sum for h in tokens if h is not None)
        if scheduled > 0:
            figures["chunk_token_s"] = seconds / scheduled
    return ServerFigures(**figures)


def table_first(run: Run) -> Run:
    """``run`` with its request table read before anything else of it: a damaged table is
    then the one line every reader gives (``runfmt.tables``), not a complaint about what
    the run's documents lack."""
    run.tables.requests  # noqa: B018 - read (and kept) now
    return run


def read_run(run: Run, flag: str = "--calibrate") -> RunReading:
    """The one place calibration reads a run (opened once: ``runfmt.run.open_run``)."""
    tables = run.tables
    try:
        measured, chunks = tables.measured, tables.chunks
    except InputError:  # a damaged table: its own line, as every reader gives it
        raise
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(flag, f"cannot read the run {run.path}: {exc}") from None
    latencies = request_latencies(measured)
    ok = latencies["ok"].astype(bool).to_numpy() & latencies[TTFT_SENT.key].notna().to_numpy()
    ttft = latencies.loc[ok, TTFT_SENT.key].to_numpy(dtype=float)
    ids = latencies.loc[ok, "id"].astype(str).to_numpy()
    gaps = token_gaps(chunks, latencies.loc[ok, "id"])
    if ttft.size == 0 or gaps.gap_s.size == 0:
        raise InputError(flag, f"{run.path} has no completed request with token gaps")
    spans = request_spans(measured[ok], gaps, chunks)
    client = run.summary.client if run.summary is not None else None
    limits = tuple(client.reasons or ()) if client is not None and client.limited else ()
    lag = client.dispatch_lag_p99_s if client is not None else None
    return RunReading(ids, ttft, gaps, spans, _server_figures(run), limits, lag)


def measure_run(reading: RunReading) -> FitFigures:
    """The run's figures over its measured, completed requests: TTFT p50 and mean from
    the actual send, the client's ITL p50/p99, and the server's means where it has them."""
    gaps = reading.gaps.gap_s
    p50, p99 = quantiles(gaps, (0.5, 0.99))
    server = reading.server
    return FitFigures(
        ttft_p50=float(np.median(reading.ttft_s)),
        itl_p50=float(p50),
        itl_p99=float(p99),
        decode_step_mean=server.decode_step_mean,
        itl_mean=server.itl_mean if server.itl_mean is not None else float(np.mean(gaps)),
        ttft_mean=float(np.mean(reading.ttft_s)),
        chunk_step_mean=server.chunk_step_mean,
        chunk_token_s=server.chunk_token_s,
    )


def client_warning(reading: RunReading, run: Run) -> str | None:
    """One line when the client shaped the run (``None`` when it did not)."""
    if not reading.client_limits:
        return None
    lag = reading.dispatch_lag_p99_s
    share = f" ({lag / float(np.median(reading.ttft_s)):.0%} of its TTFT p50)" if lag else ""
    return (
        f"{run.path} was client-limited ({'; '.join(reading.client_limits)}){share}: "
        "TTFT is fitted from the actual send times, and the load the server saw was not "
        "the plan's; rerun with more --workers or a lower rate to fit the plan's load"
    )
