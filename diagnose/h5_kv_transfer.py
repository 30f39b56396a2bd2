"""H5: the KV transfer is on the critical path — in a disaggregated (P/D) deployment, the
time a prompt's KV spends crossing from the prefill to the decode worker is a large
share of TTFT.

Readings, from the server's canonical series (``probes.canonical``, read through the
flavour's mapping in ``probes/mappings/``, so a vLLM, an SGLang and the embedded server
with the same transfers give the same verdict), all over the run as histogram increases:

* **the post-prefill wait per request**: ``kv_transfer_wait_s`` (the embedded engine:
  prefill end → KV on the decode worker), else ``kv_transfer_latency_ms`` (per transfer:
  vLLM's NIXL transfer time, SGLang's KV transfer latency; a per-request figure when the
  cache is sent whole);
* against **TTFT** (``ttft``): the share of TTFT the wait is, and the wait against the
  rest of TTFT (queue + prefill + the first decode step);
* **the link**: bytes per transfer (``kv_transfer_size_bytes``), the throughput the
  transfers achieved (bytes over transfer time), and the deepest queue of transfers
  sharing it (``kv_transfer_queue_depth``) — a link that many transfers share delivers
  each at a fraction of its rate.

Each piece of evidence names the canonical series and the server metric it was read
from. Supported from ``SHARE`` of TTFT, weakened from ``PARTIAL_SHARE`` of that; not
applicable on a server without transfer metrics (a monolithic engine).
"""

from __future__ import annotations

from diagnose.context import Context
from diagnose.next_steps import bench_command, simulate_command
from diagnose.registry import hypothesis
from probes.canonical import Histogram
from probes.normalise import ServerSeries
from runfmt.diagnosis import Evidence, Finding, Status
from runfmt.series import Hist, Series

TITLE = "KV transfer on the critical path"
#: Canonical series H5 reads (``probes.canonical``).
WAIT = Hist.KV_TRANSFER_WAIT_S
XFER_MS = Hist.KV_TRANSFER_LATENCY_MS
SIZE = Hist.KV_TRANSFER_SIZE_BYTES
DEPTH = Series.KV_TRANSFER_QUEUE_DEPTH
TTFT = Hist.TTFT
#: Share of TTFT spent waiting for the KV from which the transfer is on the critical path.
SHARE = 0.2
#: Below this share of the threshold "not supported"; between, weakened.
PARTIAL_SHARE = 0.5


def _source(series: ServerSeries, name: str) -> str:
    """A canonical series and the server metric it came from: ``ttft
    (vllm:time_to_first_token_seconds)``."""
    metric = series.sources.get(name)
    return f"{name} ({metric})" if metric else name


def _seconds(series: ServerSeries) -> tuple[Histogram | None, float, str]:
    """The KV wait's histogram, the factor that makes its values seconds, its source."""
    wait = series.histogram_increase(WAIT)
    if wait is not None and wait.count:
        return wait, 1.0, _source(series, WAIT)
    return series.histogram_increase(XFER_MS), 1e-3, _source(series, XFER_MS)


def _next(ctx: Context) -> str:
    return (
        "Measure the transfer alone: rerun with the KV sent per chunk (serve "
        "--kv-transfer overlap) or over a faster link, and predict both first with "
        f"{simulate_command(ctx.view, ['--disaggregate', '1:1', '--kv-transfer', 'overlap'])}; "
        f"then: {bench_command(ctx.view)}"
    )


@hypothesis(
    id="H5",
    title=TITLE,
    role="root",
    order=7,
    precedence=4,
    measure_first="Measure the KV transfer alone before changing the P:D split or the link",
    contain="transfer",
)
def assess(ctx: Context) -> Finding:
    series = ctx.view.server
    wait, to_s, source = _seconds(series) if series is not None else (None, 1.0, "")
    if series is None or wait is None or not wait.count:
        return Finding(
            "H5",
            TITLE,
            Status.NOT_APPLICABLE,
            "No KV transfer metrics: not a disaggregated (P/D) server.",
            next=(
                "To weigh P/D for this workload before deploying it, predict it: "
                f"{simulate_command(ctx.view, ['--disaggregate', '1:1', '--gpus', '2'])} "
                "(TTFT, ITL, break-even link)"
            ),
        )
    wait_sum = wait.sum * to_s
    evidence = [Evidence("KV wait per request (mean)", wait_sum / wait.count, "s", source)]
    missing: list[str] = []
    ttft = series.histogram_increase(TTFT)
    sent = series.histogram_increase(SIZE)
    xfer = series.histogram_increase(XFER_MS)
    if sent is not None and sent.count:
        evidence.append(
            Evidence("bytes per transfer (mean)", sent.sum / sent.count, "B", _source(series, SIZE))
        )
        if xfer is not None and xfer.sum > 0:
            evidence.append(
                Evidence(
                    "achieved link throughput per transfer",
                    sent.sum * 8 / (xfer.sum * 1e-3) / 1e9,
                    "Gb/s",
                    f"{_source(series, SIZE)} ÷ {_source(series, XFER_MS)}",
                    "below the line rate when transfers share the link or carry fixed costs",
                )
            )
    depth = series.level(DEPTH)
    if depth.max is not None:
        evidence.append(
            Evidence("deepest transfer queue", depth.max, "transfers", _source(series, DEPTH))
        )
    ttft_source = _source(series, TTFT)
    if ttft is None or not ttft.count or not ttft.sum:
        missing.append(f"the server's TTFT histogram ({ttft_source})")
        return Finding(
            "H5",
            TITLE,
            Status.INCONCLUSIVE,
            "The KV wait cannot be set against TTFT.",
            evidence,
            missing,
            _next(ctx),
        )
    share = min(1.0, wait_sum / ttft.sum)
    rest = max(ttft.sum - wait_sum, 0.0) / ttft.count
    evidence += [
        Evidence("TTFT (mean)", ttft.sum / ttft.count, "s", ttft_source),
        Evidence(
            "KV wait / TTFT", share, "share", f"{source} ÷ {ttft_source}", "sums over the run"
        ),
        Evidence(
            "KV wait / rest of TTFT",
            (wait_sum / wait.count) / rest if rest > 0 else float("inf"),
            "x",
            f"{source} ÷ ({ttft_source} − {source})",
            "the rest: queue, prefill and the first decode step",
        ),
    ]
    strength = share / SHARE
    if strength >= 1:
        status = Status.SUPPORTED
        summary = (
            f"Waiting for the KV is {share:.0%} of TTFT: the transfer is on the critical path."
        )
    elif strength >= PARTIAL_SHARE:
        status = Status.WEAKENED
        summary = f"Waiting for the KV is {share:.0%} of TTFT: a real share, not the main one."
    else:
        status = Status.NOT_SUPPORTED
        summary = f"Waiting for the KV is only {share:.0%} of TTFT."
    return Finding(
        "H5",
        TITLE,
        status,
        summary,
        evidence,
        missing,
        _next(ctx),
        strength=strength,
        basis="server",
    )
