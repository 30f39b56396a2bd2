"""The hypothesis checklist over one run, its ranking, and the decision rule.

``run_checklist(run_dir, options)`` judges every hypothesis registered in
``diagnose.registry`` — today H1 prefill chunks (``h1_prefill``), H2 host overhead
(``h2_host``), H3 KV bandwidth (``h3_bandwidth``), H4 pool exhaustion (``h4_memory``),
overload (``overload``), a client that could not keep up (``client_limited``), the KV
transfer (``h5_kv_transfer``) and the prefix cache's health (``prefix_health``) — each
with its evidence, what it lacked, the measurement that would settle it and, for those
that point at a cause, the latency it explains (its declared ``cost``).
``diagnose.ranking`` names one primary finding with a confidence and links the findings
one explains. Then it decides what to do now, following the primary's declaration:

* a **hard failure** — the engine died (the run was interrupted by the server, not by
  Ctrl-C; a ``failed`` run is the tool's own stop), connections were refused or dropped
  mid-stream, the server answered 5xx or aborted streams, or an absolute SLO
  (``--slo``, else the one the run was benched with) is breached at p99 — justifies
  immediate, bounded containment (the primary's declared ``contain``): a smaller chunk
  budget (never the one the server has) when H1 is primary or an ITL SLO broke with no
  cause named, shed load when the server was overloaded, fewer transfers on the link
  when the KV transfer (H5) is, lower concurrency otherwise, each with its numbers,
  reversible, to be confirmed by the primary's measurement afterwards;
* anything else — a relative regression, a "memory at 98 %" — does not: measure first
  (the primary's declared ``measure_first`` or ``advice``, then its own next step, which
  changes the cause it names), and leave the cache policy alone until a measurement says
  otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from diagnose.context import Context, DiagnoseOptions, build_context
from diagnose.inputs import load_run_view
from diagnose.next_steps import BUDGET_FLAG, server_flavour, smaller_budget
from diagnose.ranking import is_problem, ranked
from diagnose.registry import Declaration, declaration, declared
from diagnose.words import chunk_knob, concurrency_knob
from loadgen.records import ErrorKind
from probes.latency import request_latencies
from probes.request_counts import error_counts
from probes.token_gaps import token_gaps
from runfmt.diagnosis import Decision, Diagnosis, Finding, Primary, Status
from runfmt.metrics import E2E, ITL, TPOT, TTFT, by_key
from runfmt.names import DIAGNOSIS_JSON
from runfmt.rundir import RunDir
from runtime.quantiles import quantile
from runtime.signals import STOP_REASON_PREFIX

#: Errors that mean the server failed (not the client, not a bad request), and how to say it.
HARD_ERRORS = {
    ErrorKind.CONNECT: "connections refused or failed",
    ErrorKind.DROPPED: "requests dropped unanswered (connection closed or reset)",
    ErrorKind.STREAM_TRUNCATED: "streams cut off mid-answer (dropped connections)",
    ErrorKind.HTTP_5XX: "server errors (HTTP 5xx)",
    ErrorKind.STREAM_ERROR_EVENT: "streams aborted by the server (error events)",
}
#: Share of the peak concurrency that containment keeps.
CONTAIN_SHARE = 0.75


@dataclass(frozen=True)
class Breach:
    metric: str
    p99_s: float
    bound_s: float

    def __str__(self) -> str:
        key = by_key(self.metric).prefix  # itl_s → itl
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
        ITL.key: token_gaps(ctx.view.chunks, ids).gap_s,
        **{
            m: latencies[m].to_numpy(dtype=float) if latencies is not None else np.array([])
            for m in (TTFT.key, TPOT.key, E2E.key)
        },
    }
    out = []
    for metric, bound in slo.bounds():
        finite = values[metric][np.isfinite(values[metric])]
        if finite.size and (p99 := quantile(finite, 0.99)) > bound:
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
    why = str(view.info.reason or "")
    # "interrupted" is how bench records a server that stopped answering (or Ctrl-C, SIGTERM);
    # "failed" is the tool's own stop (bad input found on the way), not the server's.
    if view.status == "interrupted" and not why.startswith(STOP_REASON_PREFIX):
        reasons.append(f"the run was {view.status}: {why or 'no reason recorded'}")
        calls.add("concurrency")
    counts = error_counts(view.requests) if not view.requests.empty else {}
    for kind, words in HARD_ERRORS.items():
        if counts.get(kind):
            reasons.append(f"{counts[kind]} requests: {words} ({kind})")
            calls.add("concurrency")
    for breach in slo_breaches(ctx):
        reasons.append(str(breach))
        calls.add("chunk" if breach.metric in (ITL.key, TPOT.key) else "concurrency")
    return reasons, calls


NO_CAUSE = (
    "No cause stands out: measure before changing cache policy or chunk size, and keep "
    "this run as the baseline for `prefillscope compare`."
)


def next_measurement(ctx: Context, primary: Primary, findings: dict[str, Finding]) -> str:
    """The measurement that would confirm or refute the primary finding: its declared
    advice, else its declared lead-in before its own next step."""
    found = findings.get(primary.finding)
    if found is None:
        return NO_CAUSE
    d = declaration(primary.finding)
    if d is not None and d.advice is not None:
        return d.advice(ctx, found)
    lead = d.measure_first if d is not None else "Confirm it before changing the configuration"
    return f"{lead}: {found.next}"


def _chunk_step(ctx: Context) -> str:
    budget, _ = ctx.budget
    kind = server_flavour(ctx.view)
    knob = chunk_knob(kind)
    if budget is None:
        return (
            f"lower {knob} below the server's current value (not recorded: give diagnose "
            f"{BUDGET_FLAG} N to get a figure), e.g. to half of it"
        )
    smaller = smaller_budget(budget)
    if smaller >= budget:
        return f"keep {knob} at {budget} (already the smallest sensible)"
    return (
        f"lower {knob} from {budget} to {smaller} ({kind.chunk_setting(smaller)}: each step "
        f"then carries at most {smaller} prompt tokens beside the decodes)"
    )


def _concurrency_step(ctx: Context) -> str:
    peak = peak_in_flight(ctx)
    cap = max(1, int(CONTAIN_SHARE * peak))
    knob = concurrency_knob(server_flavour(ctx.view))
    return (
        f"cap concurrency at {cap} ({knob} or the client's limit; "
        f"{CONTAIN_SHARE:.0%} of the {peak} requests in flight at the peak)"
    )


def _shed_step(ctx: Context, findings: dict[str, Finding]) -> str:
    served = next(
        (
            e.value
            for f in findings.values()
            for e in f.evidence
            if e.name.startswith("served rate")
        ),
        None,
    )
    rate = f" or the offered rate at the {served:.3g} req/s it served" if served else ""
    return f"shed load: {_concurrency_step(ctx)}{rate}"


def _containment(
    ctx: Context, calls: set[str], primary: Primary, findings: dict[str, Finding]
) -> str:
    steps = []
    d = declaration(primary.finding)
    contain = d.contain if d is not None else None  # None: no cause named
    if contain == "chunk" or (contain is None and "chunk" in calls):
        steps.append(_chunk_step(ctx))
    if contain == "shed":
        steps.append(_shed_step(ctx, findings))
    elif contain == "transfer":
        steps.append(f"{_concurrency_step(ctx)}, so that fewer KV transfers share the link")
    elif "concurrency" in calls or contain not in ("chunk", None) or not steps:
        steps.append(_concurrency_step(ctx))
    return (
        f"Hard failure: contain now — {'; and '.join(steps)}. This is bounded and reversible; "
        f"confirm the cause before making it permanent. {next_measurement(ctx, primary, findings)}"
    )


def decide(ctx: Context, findings: dict[str, Finding], primary: Primary) -> Decision:
    reasons, calls = _hard_failures(ctx)
    if reasons:
        return Decision(True, tuple(reasons), _containment(ctx, calls, primary, findings))
    return Decision(
        False,
        (
            "no hard failure: no engine death, no dropped connections or server errors"
            + (", no SLO breach" if ctx.slo else ", no SLO given (--slo)"),
        ),
        next_measurement(ctx, primary, findings),
    )


def judged(ctx: Context, d: Declaration) -> Finding:
    """One hypothesis judged, with the latency it explains when it declares how and points
    at a cause (supported, weakened, or a cache problem): what a cause the evidence points
    away from would cost is no figure to show."""
    finding = d.assess(ctx)
    pointing = is_problem(finding) or finding.status == Status.WEAKENED
    if finding.cost_s is None and d.cost is not None and pointing:
        cost = d.cost(ctx, finding)
        if cost is not None:
            return replace(finding, cost_s=cost.seconds, cost_how=cost.how)
    return finding


def run_checklist(
    run_dir: RunDir | str | Path, options: DiagnoseOptions | None = None
) -> Diagnosis:
    """Judge every registered hypothesis and the prefix cache for one run, rank them, and
    decide (``diagnose.registry``: each declared beside its ``assess``)."""
    path = run_dir.path if isinstance(run_dir, RunDir) else run_dir
    ctx = build_context(load_run_view(path), options or DiagnoseOptions())
    checks = declared()
    hypotheses = [judged(ctx, d) for d in checks if not d.prefix_cache]
    caches = [judged(ctx, d) for d in checks if d.prefix_cache]
    findings, primary = ranked({f.id: f for f in [*hypotheses, *caches]}, ctx.client)
    decision = decide(ctx, findings, primary)
    cache = findings[caches[0].id] if caches else None
    final = tuple(findings[f.id] for f in hypotheses)
    return Diagnosis(str(ctx.view.path), decision, final, cache, primary)


def write_diagnosis(run_dir: str | Path, diagnosis: Diagnosis) -> Path:
    """``RUN_DIR/diagnosis.json`` (atomically, like every run file)."""
    run = RunDir(run_dir)
    run.write_json(DIAGNOSIS_JSON, diagnosis.to_json())
    return run.path / DIAGNOSIS_JSON
