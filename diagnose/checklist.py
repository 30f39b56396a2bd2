"""The hypothesis checklist over one run, and the decision rule (DESIGN.md §1).

``run_checklist(run_dir, options)`` judges the four competing explanations of a bad ITL
— H1 prefill chunks (``h1_prefill``), H2 host overhead (``h2_host``), H3 KV bandwidth
(``h3_bandwidth``), H4 pool exhaustion (``h4_memory``) — and the prefix cache's health
(``prefix_health``), each with its evidence, what it lacked and the measurement that
would settle it. Then it decides what to do now:

* a **hard failure** — the engine died (the run was interrupted by the server, not by
  Ctrl-C; a ``failed`` run is the tool's own stop), connections were refused or dropped
  mid-stream, the server answered 5xx or aborted streams, or an absolute SLO
  (``--slo``, else the one the run was benched with) is breached at p99 — justifies
  immediate, bounded containment: a smaller chunk budget when ITL suffers or H1 is
  supported, lower concurrency when the server fell over, queued or ran out of memory,
  each with its numbers, reversible, to be confirmed by the A/B afterwards;
* anything else — a relative regression, a "memory at 98 %" — does not: measure first
  (the A/B), and leave the cache policy alone until a measurement says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from diagnose import h1_prefill, h2_host, h3_bandwidth, h4_memory, prefix_health
from diagnose.context import Context, DiagnoseOptions, build_context
from diagnose.evidence import Decision, Diagnosis, Finding, Status
from diagnose.inputs import load_run_view
from diagnose.next_steps import ab_command
from loadgen.records import ErrorKind
from loadgen.rundir import RunDir
from probes.latency import error_counts, request_latencies, token_gaps

DIAGNOSIS_JSON = "diagnosis.json"
#: Errors that mean the server failed (not the client, not a bad request), and how to say it.
HARD_ERRORS = {
    ErrorKind.CONNECT: "connections refused or failed",
    ErrorKind.STREAM_TRUNCATED: "streams cut off mid-answer (dropped connections)",
    ErrorKind.HTTP_5XX: "server errors (HTTP 5xx)",
    ErrorKind.STREAM_ERROR_EVENT: "streams aborted by the server (error events)",
}
#: Share of the peak concurrency that containment keeps.
CONTAIN_SHARE = 0.75
CTRL_C = "Ctrl-C"


@dataclass(frozen=True)
class Breach:
    metric: str
    p99_s: float
    bound_s: float

    def __str__(self) -> str:
        key = self.metric.removesuffix("_s")
        return f"{key.upper()} p99 {self.p99_s:.3g} s breaches the SLO {key}<={self.bound_s:g} s"


def slo_breaches(ctx: Context) -> list[Breach]:
    """Each SLO whose metric's p99 over the completed requests exceeds its bound."""
    slo = ctx.slo
    if not slo:
        return []
    done = ctx.view.completed
    latencies = request_latencies(done) if not done.empty else None
    ids = done["id"] if "id" in done.columns else []
    values = {
        "itl_s": token_gaps(ctx.view.chunks, ids).gap_s,
        **{
            m: latencies[m].to_numpy(dtype=float) if latencies is not None else np.array([])
            for m in ("ttft_s", "tpot_s", "e2e_s")
        },
    }
    out = []
    for metric, bound in slo.to_dict().items():
        finite = values[metric][np.isfinite(values[metric])]
        if finite.size and (p99 := float(np.percentile(finite, 99))) > bound:
            out.append(Breach(metric, p99, bound))
    return out


def peak_in_flight(ctx: Context) -> int:
    """Most measured requests in flight at once (sent, not yet ended)."""
    sent, end = ctx.view.column("sent_s"), ctx.view.column("end_s")
    ok = np.isfinite(sent)
    end = np.where(np.isfinite(end), end, np.inf)[ok]
    events = np.concatenate([np.ones(ok.sum()), -np.ones(ok.sum())])
    order = np.argsort(np.concatenate([sent[ok], end]), kind="stable")
    return int(np.cumsum(events[order]).max(initial=0))


def _hard_failures(ctx: Context) -> tuple[list[str], set[str]]:
    """Reasons, and which containment each calls for (``chunk``, ``concurrency``)."""
    view = ctx.view
    reasons: list[str] = []
    calls: set[str] = set()
    why = str(view.info.get("reason") or "")
    # "interrupted" is how bench records a server that stopped answering (or Ctrl-C);
    # "failed" is the tool's own stop (bad input found on the way), not the server's.
    if view.status == "interrupted" and CTRL_C not in why:
        reasons.append(f"the run was {view.status}: {why or 'no reason recorded'}")
        calls.add("concurrency")
    counts = error_counts(view.requests) if not view.requests.empty else {}
    for kind, words in HARD_ERRORS.items():
        if counts.get(kind):
            reasons.append(f"{counts[kind]} requests: {words} ({kind})")
            calls.add("concurrency")
    for breach in slo_breaches(ctx):
        reasons.append(str(breach))
        calls.add("chunk" if breach.metric in ("itl_s", "tpot_s") else "concurrency")
    return reasons, calls


def _containment(ctx: Context, calls: set[str], findings: dict[str, Finding]) -> str:
    steps = []
    supported = {hid for hid, f in findings.items() if f.status == Status.SUPPORTED}
    if ("chunk" in calls and "H4" not in supported) or "H1" in supported:
        budget, _ = ctx.budget
        if budget and budget > h1_prefill.SMALL_CHUNK:
            smaller = max(h1_prefill.SMALL_CHUNK, budget // 4)
            steps.append(
                f"lower max_num_batched_tokens from {budget} to {smaller} (each step then "
                f"carries at most {smaller} prompt tokens beside the decodes)"
            )
        elif budget:
            steps.append(f"halve max_num_batched_tokens from {budget} to {max(64, budget // 2)}")
        else:
            steps.append(f"set max_num_batched_tokens to {h1_prefill.SMALL_CHUNK}")
    if "concurrency" in calls or "H4" in supported or not steps:
        peak = peak_in_flight(ctx)
        cap = max(1, int(CONTAIN_SHARE * peak))
        steps.append(
            f"cap concurrency at {cap} (--max-num-seqs or the client's limit; "
            f"{CONTAIN_SHARE:.0%} of the {peak} requests in flight at the peak)"
        )
    budget, _ = ctx.budget
    ab = ab_command(ctx.view, (h1_prefill.SMALL_CHUNK, budget or 4 * h1_prefill.SMALL_CHUNK))
    return (
        f"Hard failure: contain now — {'; and '.join(steps)}. This is bounded and reversible; "
        f"confirm the cause before making it permanent: {ab}"
    )


def decide(ctx: Context, findings: dict[str, Finding]) -> Decision:
    reasons, calls = _hard_failures(ctx)
    if reasons:
        return Decision(True, reasons, _containment(ctx, calls, findings))
    budget, _ = ctx.budget
    ab = ab_command(ctx.view, (h1_prefill.SMALL_CHUNK, budget or 4 * h1_prefill.SMALL_CHUNK))
    return Decision(
        False,
        [
            "no hard failure: no engine death, no dropped connections or server errors"
            + (", no SLO breach" if ctx.slo else ", no SLO given (--slo)")
        ],
        "Measure before changing cache policy or chunk size: the findings are "
        f"correlations. Run the controlled A/B first: {ab}",
    )


def run_checklist(
    run_dir: RunDir | str | Path, options: DiagnoseOptions | None = None
) -> Diagnosis:
    """Judge every hypothesis and the prefix cache for one run, and decide."""
    path = run_dir.path if isinstance(run_dir, RunDir) else run_dir
    ctx = build_context(load_run_view(path), options or DiagnoseOptions())
    hypotheses = [m.assess(ctx) for m in (h1_prefill, h2_host, h3_bandwidth, h4_memory)]
    cache = prefix_health.assess(ctx)
    decision = decide(ctx, {h.id: h for h in hypotheses})
    return Diagnosis(str(ctx.view.path), decision, hypotheses, cache)


def write_diagnosis(run_dir: str | Path, diagnosis: Diagnosis) -> Path:
    """``RUN_DIR/diagnosis.json`` (atomically, like every run file)."""
    run = RunDir(run_dir)
    run.write_json(DIAGNOSIS_JSON, diagnosis.to_dict())
    return run.path / DIAGNOSIS_JSON
