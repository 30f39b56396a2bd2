"""H3: HBM-bandwidth-bound decode — KV reads of a large batch at long contexts dominate.

Every decode step reads the weights once and every running sequence's KV cache:
``running × (context + 1) × bytes per token`` (``CostModel.kv_bytes_per_step``). At
that traffic and the GPU's bandwidth the KV reads alone take a computable time; the
share of each decode step they account for says whether KV traffic is what sets ITL.
When the server exposes its own decode step (``h2_host.server_step``) that share is of
the server's step at the batch it carried — a slow client cannot stretch it; otherwise
it is the median over the pure-decode gaps the client saw (each gap costed at its own
batch size and mean context). With caution, how ITL tracks KV bytes across time
windows is shown too (a rank correlation: the load also moves other things).

Supported from ``KV_SHARE`` up; ``KV_SHARE_PARTIAL`` up it is weakened (a sizeable
share, not the bulk). A modelled share is a correlation with a model: an A/B at a
smaller decode batch (``--max-concurrency``) or shorter contexts at equal arrivals
would confirm it.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from diagnose.attribution import DecodeGaps
from diagnose.context import Context
from diagnose.costs import decode_share_cost
from diagnose.h2_host import server_step
from diagnose.next_steps import bench_command
from diagnose.registry import hypothesis
from diagnose.words import percent
from runfmt.diagnosis import Evidence, Finding, Status

TITLE = "HBM-bandwidth-bound decode (KV reads)"
#: Median share of a decode gap spent reading KV from which H3 is supported.
KV_SHARE = 0.5
KV_SHARE_PARTIAL = 0.2
#: Time windows the correlation is taken over, and the fewest worth a correlation.
WINDOWS = 20
MIN_WINDOWS = 6
CLIENT = "client: chunks (pure-decode gaps)"


def window_correlation(gaps: DecodeGaps, kv_bytes: np.ndarray) -> tuple[float, float, int] | None:
    """Spearman's rho (and p) between windowed mean ITL and windowed mean KV bytes/step."""
    if len(gaps) < MIN_WINDOWS * 5:
        return None
    edges = np.linspace(gaps.end_s.min(), gaps.end_s.max(), WINDOWS + 1)
    slot = np.clip(np.searchsorted(edges, gaps.end_s, side="right") - 1, 0, WINDOWS - 1)
    counts = np.bincount(slot, minlength=WINDOWS)
    used = counts > 0
    if used.sum() < MIN_WINDOWS:
        return None
    itl = np.bincount(slot, weights=gaps.gap_s, minlength=WINDOWS)[used] / counts[used]
    kv = np.bincount(slot, weights=kv_bytes, minlength=WINDOWS)[used] / counts[used]
    if np.ptp(kv) <= 0.05 * kv.mean():  # KV traffic did not vary: nothing to track
        return None
    rho, p = sps.spearmanr(kv, itl)
    return float(rho), float(p), int(used.sum())


def _next(ctx: Context) -> str:
    users = ctx.view.spec.load.concurrency if ctx.view.spec is not None else None
    if users:
        rerun = bench_command(ctx.view, load={"concurrency": max(1, int(users) // 2)})
        return (
            f"Rerun with half the decode batch and compare ITL with `prefillscope compare`: "
            f"{rerun} — KV-bound decode speeds up in proportion to the KV bytes removed."
        )
    return (
        "Rerun the same workload with a lower --max-concurrency (a smaller decode batch) "
        "and compare the runs with `prefillscope compare`: KV-bound decode speeds up in "
        "proportion to the KV bytes removed."
    )


@hypothesis(
    id="H3",
    title=TITLE,
    role="step",
    order=3,
    precedence=6,
    reads_latency=True,
    measure_first=("Measure a smaller decode batch before changing the chunk size or cache policy"),
    cost=decode_share_cost,
)
def assess(ctx: Context) -> Finding:
    gaps = ctx.clear
    evidence: list[Evidence] = []
    missing: list[str] = []
    if ctx.roofline is None:
        return ctx.lacks_roofline(("H3", TITLE, _next(ctx)), evidence, missing)
    if len(gaps) == 0:
        missing.append("decode gaps (no request produced two tokens)")
        return Finding(
            "H3",
            TITLE,
            Status.INCONCLUSIVE,
            "No decode gaps to explain.",
            evidence,
            missing,
            _next(ctx),
        )
    roofline = ctx.roofline
    kv_bytes = roofline.kv_bytes(gaps.running, gaps.context)
    kv_s = roofline.kv_read_s(gaps.running, gaps.context)
    client_share = float(np.median(kv_s / gaps.gap_s))
    modelled = float(np.median(kv_s / roofline.decode_step_s(gaps.running, gaps.context)))
    label = roofline.label
    reading = server_step(ctx, float(np.nanmedian(gaps.context)))
    if reading is not None:
        # The server's step clock is not stretched by a slow client: it decides.
        server_kv = float(roofline.kv_read_s(np.array([reading.batch]), [reading.context])[0])
        share, basis = server_kv / reading.step_s, "server"
    else:
        share, basis = client_share, "model"
    evidence += [
        Evidence("median decode batch", float(np.median(gaps.running)), "requests", CLIENT),
        Evidence("median context", float(np.nanmedian(gaps.context)), "tokens", CLIENT),
        Evidence(
            "KV bytes per decode step (median)",
            float(np.median(kv_bytes)) / 1e9,
            "GB",
            label,
            f"running × (context + 1) × {roofline.kv_bytes_per_token:.0f} B/token",
        ),
        Evidence(
            "HBM bytes per second",
            roofline.bytes_per_s / 1e9,
            "GB/s",
            label,
            "bandwidth × efficiency (÷ time_scale)",
        ),
        Evidence(
            "share of each decode gap spent reading KV (median)",
            100 * client_share,
            "%",
            f"{label} ÷ {CLIENT}",
        ),
        Evidence("share of the roofline decode step that is KV reads", 100 * modelled, "%", label),
    ]
    if reading is not None:
        evidence.append(
            Evidence(
                "share of the server's decode step spent reading KV",
                100 * share,
                "%",
                f"{label} ÷ {reading.source}",
                f"{reading.batch} sequences at context {reading.context:.0f}",
            )
        )
    tracked = window_correlation(gaps, kv_bytes)
    if tracked is None:
        missing.append("KV traffic that varied over the run (to see ITL track it)")
    else:
        rho, p, windows = tracked
        evidence.append(
            Evidence(
                "ITL vs KV bytes across time windows (Spearman rho)",
                rho,
                "",
                CLIENT,
                f"{windows} windows, p={p:.2g}; a correlation: load moves other things too",
            )
        )
    if share >= KV_SHARE:
        status, summary = (
            Status.SUPPORTED,
            (
                f"Correlation with a model, not proof: reading the batch's KV cache "
                f"({np.median(kv_bytes) / 1e9:.3g} GB per step) takes {percent(share)} of each "
                f"decode step ({basis} reading) at this GPU's bandwidth."
            ),
        )
    elif share >= KV_SHARE_PARTIAL:
        status, summary = (
            Status.WEAKENED,
            (
                f"KV reads take {percent(share)} of each decode step: a sizeable share, "
                "not the bulk."
            ),
        )
    else:
        status, summary = (
            Status.NOT_SUPPORTED,
            (
                f"KV reads take only {percent(share)} of each decode step "
                f"({np.median(kv_bytes) / 1e9:.3g} GB per step)."
            ),
        )
    return Finding(
        "H3",
        TITLE,
        status,
        summary,
        evidence,
        missing,
        _next(ctx),
        strength=share / KV_SHARE,
        basis=basis,
        impact=share,
    )
