"""Client-limited: the load generator's own delays, and how much of the latency they are.

A client that falls behind makes the server look different from what it is: requests
go out late (dispatch lag, ``sent_s − intended_s``, counted in TTFT from the intended
send) and tokens are read late (the event loop's lag, sampled in the run's ``client``
table), which shortens one gap and lengthens the next. ``probes.latency.client_health``
flags a run client-limited (dispatch lag p99 over 5 ms, or a saturated client CPU);
here that flag is turned into shares a finding can be weighed against:

* **TTFT share**: median dispatch lag ÷ median TTFT (from the intended send);
* **ITL share**: the event loop's lag p99 ÷ the ITL p99 (a late read adds at most that
  to one gap).

A latency finding that rests on client timing is capped at ``inconclusive`` when the
client's share of the latency it reads reaches ``CAP_SHARE``; below that it says how much
of the latency is the client's (``diagnose.ranking``). The client-limited finding itself
is supported when the run was flagged, and can be the primary finding when the client's
share reaches ``PRIMARY_SHARE``: then the client, not the server, shaped the figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from diagnose.inputs import RunView
from diagnose.next_steps import bench_command
from diagnose.registry import hypothesis
from diagnose.words import percent
from probes.latency import client_health, measured_window, request_latencies
from probes.token_gaps import token_gaps
from runfmt.diagnosis import Evidence, Finding, Status
from runfmt.metrics import DISPATCH_LAG, TTFT
from runtime.quantiles import quantile

if TYPE_CHECKING:
    from diagnose.context import Context

TITLE = "Client-limited load generator"
#: Client share of a latency from which a finding that reads it is capped.
CAP_SHARE = 0.25
#: Client share from which the client, not the server, is the primary finding.
PRIMARY_SHARE = 0.5
SOURCE = "client: requests (sent − intended) + client table (event-loop lag, CPU)"


@dataclass(frozen=True)
class ClientHealth:
    """Whether the client limited the run, why, and its share of TTFT and ITL."""

    limited: bool
    reasons: tuple[str, ...] = ()
    ttft_share: float | None = None
    itl_share: float | None = None
    dispatch_lag_p50_s: float | None = None
    loop_lag_p99_s: float | None = None
    cpu_sustained: float | None = None

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons) or "not limited"

    @property
    def share(self) -> float:
        """The larger of the two shares (0 when neither is known)."""
        return max(self.ttft_share or 0.0, self.itl_share or 0.0)

    def note(self) -> str:
        """How much of the latency is the client's, as a clause."""
        parts = []
        if self.itl_share is not None:
            parts.append(f"{percent(self.itl_share)} of the ITL p99")
        if self.ttft_share is not None:
            parts.append(f"{percent(self.ttft_share)} of the median TTFT")
        shares = f": at most {' and '.join(parts)} is the client's" if parts else ""
        return f"The client limited this run ({self.reason}){shares}."


def _share(part: float | None, whole: float | None) -> float | None:
    if part is None or whole is None or not np.isfinite(part) or whole <= 0:
        return None
    return float(min(1.0, max(0.0, part) / whole))


def read_client_health(view: RunView) -> ClientHealth:
    """The client's health over the measured window, from the run's own tables."""
    if view.requests.empty:
        return ClientHealth(False)
    latencies = request_latencies(view.requests)
    health = client_health(
        latencies[DISPATCH_LAG.key].to_numpy(), view.client, measured_window(view.requests)
    )
    done = latencies[latencies["ok"]]
    lag = done[DISPATCH_LAG.key].to_numpy(dtype=float)
    ttft = done[TTFT.key].to_numpy(dtype=float)
    lag_p50 = float(np.nanmedian(lag)) if np.isfinite(lag).any() else None
    ttft_p50 = float(np.nanmedian(ttft)) if np.isfinite(ttft).any() else None
    loop = health.loop_lag.p99 if health.loop_lag is not None else None
    ids = view.completed["id"] if "id" in view.completed.columns else []
    gaps = token_gaps(view.chunks, ids).gap_s
    itl_p99 = quantile(gaps, 0.99) if gaps.size else None
    return ClientHealth(
        limited=bool(health.limited),
        reasons=health.reasons,
        ttft_share=_share(lag_p50, ttft_p50),
        itl_share=_share(loop, itl_p99),
        dispatch_lag_p50_s=lag_p50,
        loop_lag_p99_s=loop,
        cpu_sustained=health.cpu_sustained_max,
    )


@hypothesis(
    id="CL",
    title=TITLE,
    role="client",
    order=6,
    may_lead=False,
    explains_client_clock="the client's own delays are a large part of what it measured",
    measure_first="Rerun from a client that keeps up before trusting any latency finding",
)
def assess(ctx: Context) -> Finding:
    health = ctx.client
    evidence = [
        Evidence(name, value, unit, SOURCE)
        for name, value, unit in (
            ("dispatch lag (median)", health.dispatch_lag_p50_s, "s"),
            ("event-loop lag p99", health.loop_lag_p99_s, "s"),
            ("client CPU, sustained peak", health.cpu_sustained, "cores"),
            (
                "client share of median TTFT",
                None if health.ttft_share is None else 100 * health.ttft_share,
                "%",
            ),
            (
                "client share of ITL p99",
                None if health.itl_share is None else 100 * health.itl_share,
                "%",
            ),
        )
        if value is not None
    ]
    missing = [] if not ctx.view.client.empty else ["the client table (event-loop lag, CPU)"]
    next_step = (
        "Rerun on a client machine with idle cores (or fewer requests in flight per "
        f"client) and compare: {bench_command(ctx.view)}"
    )
    if not health.limited:
        return Finding(
            "CL",
            TITLE,
            Status.NOT_SUPPORTED,
            "The client kept up: dispatch lag and client CPU stayed within bounds.",
            evidence,
            missing,
            next_step,
            strength=health.share / PRIMARY_SHARE,
            basis="client",
        )
    status = Status.SUPPORTED if health.share >= CAP_SHARE else Status.WEAKENED
    summary = health.note() + (
        " The client's delays are a large part of what was measured."
        if status == Status.SUPPORTED
        else " A small part of the latency: the server's figures stand."
    )
    return Finding(
        "CL",
        TITLE,
        status,
        summary,
        evidence,
        missing,
        next_step,
        strength=health.share / PRIMARY_SHARE,
        basis="client",
    )
