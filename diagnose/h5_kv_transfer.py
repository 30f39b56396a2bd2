"""H5: the KV transfer is on the critical path — in a disaggregated (P/D) deployment, the
time a prompt's KV spends crossing from the prefill to the decode worker is a large
share of TTFT.

Readings, from the server's own metrics (all over the run, as histogram increases):

* **the post-prefill wait per request**: ``prefillscope_engine_kv_transfer_seconds``
  (the embedded engine: prefill end → KV on the decode worker), else vLLM's NIXL
  ``vllm:nixl_xfer_time_seconds`` (per transfer, which is a per-request figure when
  the cache is sent whole);
* against **TTFT** (``vllm:time_to_first_token_seconds``): the share of TTFT the wait
  is, and the wait against the rest of TTFT (queue + prefill + the first decode step);
* **the link**: bytes per transfer (``vllm:nixl_bytes_transferred``), the throughput
  the transfers achieved (bytes over transfer seconds), and the deepest queue of
  transfers sharing it (``prefillscope_engine_kv_transfer_queue_depth``) — a link that
  many transfers share delivers each at a fraction of its rate.

Supported from ``SHARE`` of TTFT, weakened from ``PARTIAL_SHARE`` of that; not
applicable on a server without transfer metrics (a monolithic engine).
"""

from __future__ import annotations

from diagnose.context import Context
from diagnose.next_steps import bench_command
from diagnose.registry import hypothesis
from runfmt.diagnosis import Evidence, Finding, Status

TITLE = "KV transfer on the critical path"
WAIT_METRIC = "prefillscope_engine_kv_transfer_seconds"
XFER_METRIC = "vllm:nixl_xfer_time_seconds"
BYTES_METRIC = "vllm:nixl_bytes_transferred"
DEPTH_METRIC = "prefillscope_engine_kv_transfer_queue_depth"
TTFT_METRIC = "vllm:time_to_first_token_seconds"
#: Share of TTFT spent waiting for the KV from which the transfer is on the critical path.
SHARE = 0.2
#: Below this share of the threshold "not supported"; between, weakened.
PARTIAL_SHARE = 0.5


def _next(ctx: Context) -> str:
    return (
        "Measure the transfer alone: rerun with the KV sent per chunk (serve "
        "--kv-transfer overlap) or over a faster link, and predict both first with "
        "prefillscope simulate --workload … --disaggregate P:D --kv-link-gbps G "
        "(prefillscope calc kv --chunk N --chunk-ms T gives the exposed time per request); "
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
    raw = ctx.view.raw
    wait = raw.histogram_increase(WAIT_METRIC)
    source = WAIT_METRIC
    if wait is None or not wait.count:
        wait, source = raw.histogram_increase(XFER_METRIC), XFER_METRIC
    if wait is None or not wait.count:
        return Finding(
            "H5",
            TITLE,
            Status.NOT_APPLICABLE,
            "No KV transfer metrics: not a disaggregated (P/D) server.",
            next=(
                "To weigh P/D for this workload before deploying it, predict it: prefillscope "
                "simulate --workload … --disaggregate 1:1 --gpus 2 (TTFT, ITL, break-even link)"
            ),
        )
    evidence = [Evidence("KV wait per request (mean)", wait.sum / wait.count, "s", source)]
    missing: list[str] = []
    ttft = raw.histogram_increase(TTFT_METRIC)
    sent = raw.histogram_increase(BYTES_METRIC)
    xfer = raw.histogram_increase(XFER_METRIC)
    if sent is not None and sent.count:
        evidence.append(
            Evidence("bytes per transfer (mean)", sent.sum / sent.count, "B", BYTES_METRIC)
        )
        if xfer is not None and xfer.sum > 0:
            evidence.append(
                Evidence(
                    "achieved link throughput per transfer",
                    sent.sum * 8 / xfer.sum / 1e9,
                    "Gb/s",
                    f"{BYTES_METRIC} ÷ {XFER_METRIC}",
                    "below the line rate when transfers share the link or carry fixed costs",
                )
            )
    depth = raw.rows(DEPTH_METRIC)
    if not depth.empty:
        evidence.append(
            Evidence(
                "deepest transfer queue", float(depth["value"].max()), "transfers", DEPTH_METRIC
            )
        )
    if ttft is None or not ttft.count or not ttft.sum:
        missing.append(f"the server's TTFT histogram ({TTFT_METRIC})")
        return Finding(
            "H5",
            TITLE,
            Status.INCONCLUSIVE,
            "The KV wait cannot be set against TTFT.",
            evidence,
            missing,
            _next(ctx),
        )
    share = min(1.0, wait.sum / ttft.sum)
    rest = max(ttft.sum - wait.sum, 0.0) / ttft.count
    evidence += [
        Evidence("TTFT (mean)", ttft.sum / ttft.count, "s", TTFT_METRIC),
        Evidence(
            "KV wait / TTFT", share, "share", f"{source} ÷ {TTFT_METRIC}", "sums over the run"
        ),
        Evidence(
            "KV wait / rest of TTFT",
            (wait.sum / wait.count) / rest if rest > 0 else float("inf"),
            "x",
            f"{source} ÷ ({TTFT_METRIC} − {source})",
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
