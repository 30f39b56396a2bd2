"""One primary finding, its confidence, why it outranks the others, and what it explains.

The checklist judges each finding on its own; a reader needs one answer. The ranking:

1. **The client's share.** When the client limited the run, a latency finding read from
   client timing (``basis == "client"``) is capped at inconclusive if the client's share
   of that latency reaches ``client_limited.CAP_SHARE``; otherwise its summary says how
   much of the latency is the client's. A finding read on the server's clock stands.
2. **Links.** A finding that produces another's symptom explains it, and the explained
   one becomes secondary: thrashing, a lost prefix (identity mismatch) or caching off
   re-create prefills that H1 blames, and overload too when the reuse the workload
   allowed would have brought the offered work within what was served; preemptions
   (H4) recompute sequences as prefills; overload (OL) is what fills H4's queue; a
   client whose delays dominate (CL) explains every latency finding read on the
   client's clock (never a server-side reading).
3. **Candidates** are the supported findings no other supported finding explains. Root
   causes (overload, memory, the prefix cache) come first, in ``PRECEDENCE``, then a KV
   transfer on the critical path (H5, read on the server's TTFT, not a step); the
   step-level hypotheses (H1–H3) follow, ordered by the share of the decode time each
   accounts for (``Finding.impact``: the mixed steps' excess for H1, the host's share
   of a step for H2, the KV reads' share for H3), else by strength (the deciding figure
   over its threshold). A client that dominated comes last: what it explains is no
   longer a candidate, and a server-side reading it cannot explain outranks it. With
   none supported, the strongest weakened hypothesis is the primary at weak
   confidence; with none at all, ``none``.
4. **Confidence**: ``strong`` when the deciding figure is read on the server or from the
   server's counters, at least ``STRONG_MARGIN`` past its threshold, with no unexplained
   rival; ``moderate`` when supported but nearer the threshold, read on the client, or
   beside a rival; ``weak`` for a weakened primary, a reading within ``NEAR_THRESHOLD``
   of its threshold, or a run where nothing points anywhere but the evidence was
   incomplete.
"""

from __future__ import annotations

from diagnose.client_limited import CAP_SHARE, PRIMARY_SHARE, ClientHealth
from diagnose.prefix_health import LOST_SHARE
from diagnose.words import percent
from runfmt.diagnosis import CacheHealth, Finding, Primary, Status

#: Root causes before the symptoms they produce (the client is ranked last: ``_order``).
PRECEDENCE = ("OL", "H4", "PC", "H5", "H1", "H3", "H2", "CL")
#: Hypotheses about the decode step itself, ranked by the share of decode time they explain.
STEP_LEVEL = ("H1", "H2", "H3")
#: Findings that may lead as a weakened primary (a client that barely limited is a note).
LEADS = ("OL", "H4", "H5", "H1", "H3", "H2")
#: Findings that read latency (capped or annotated on a client-limited run).
LATENCY_FINDINGS = ("OL", "H1", "H2", "H3")
#: How far past its threshold a server-side reading must be to count as strong.
STRONG_MARGIN = 1.5
#: Strength under which a supported primary is only weak: within 10 % of its threshold.
NEAR_THRESHOLD = 1.1
#: A rival within this factor of the primary's strength makes it moderate at best.
RIVAL_SHARE = 0.67
#: Cache verdicts that are findings (a problem), not health.
CACHE_PROBLEMS = (CacheHealth.THRASHING, CacheHealth.IDENTITY_MISMATCH, CacheHealth.CACHING_OFF)
NONE = "none"


class Confidence:
    STRONG = "strong"
    MODERATE = "moderate"
    WEAK = "weak"


#: (cause, effect) → how the cause produces the effect's symptom.
LINKS = {
    ("PC", "H1"): "prefixes that are not reused are computed again: more of the prefill H1 blames",
    ("H4", "H1"): "preempted sequences are recomputed as prefills",
    ("OL", "H4"): "the queue the overload builds is what H4 sees waiting",
}
CLIENT_LINK = "the client's own delays are a large part of what it measured"
PC_OVERLOAD_LINK = (
    "with the reuse the workload allowed, the prompt work offered would fit in what was served"
)


def is_problem(f: Finding) -> bool:
    """A finding that points at a cause: supported, or a cache verdict that is a problem
    (and matters: a cache that could not have hit much is no cause)."""
    if f.status == Status.SUPPORTED:
        return True
    return f.status in CACHE_PROBLEMS and (f.strength is None or f.strength >= 1)


def apply_client_caps(findings: dict[str, Finding], client: ClientHealth) -> None:
    """Cap or annotate the latency findings of a client-limited run (in place)."""
    if not client.limited:
        return
    for hid in LATENCY_FINDINGS:
        f = findings.get(hid)
        if f is None or f.status not in (Status.SUPPORTED, Status.WEAKENED):
            continue
        if f.basis == "client" and client.share >= CAP_SHARE:
            f.summary = f"Capped at inconclusive (was {f.status}): {client.note()} {f.summary}"
            f.status = Status.INCONCLUSIVE
        else:
            f.summary = f"{f.summary} {client.note()}"


def _value(f: Finding, prefix: str) -> float | None:
    found = next((e.value for e in f.evidence if e.name.startswith(prefix)), None)
    return float(found) if isinstance(found, int | float) else None


def lost_reuse_overloads(findings: dict[str, Finding]) -> bool:
    """Whether the reuse the cache lost is what overloaded the server: with the hit rate
    the workload allowed, the prompt work offered would fit in what was served
    (offered × (1 − allowed) ≤ served × (1 − observed), prompt tokens per request
    taken as equal)."""
    cache, load = findings.get("PC"), findings.get("OL")
    if cache is None or load is None or cache.strength is None:
        return False
    observed = _value(cache, "observed hit rate")
    if observed is None:
        observed = _value(cache, "server-counted hit rate")
    offered, served = _value(load, "offered rate"), _value(load, "served rate")
    if observed is None or offered is None or not served:
        return False
    allowed = observed / 100 + cache.strength * LOST_SHARE
    return offered * (1 - min(allowed, 1.0)) <= served * (1 - observed / 100)


def link(findings: dict[str, Finding], client: ClientHealth) -> None:
    """Fill each finding's ``explains`` with the problems it produces (in place)."""
    problems = {hid for hid, f in findings.items() if is_problem(f)}
    pairs = [(cause, effect, words) for (cause, effect), words in LINKS.items()]
    if lost_reuse_overloads(findings):
        pairs.insert(0, ("PC", "OL", PC_OVERLOAD_LINK))
    if client.share >= PRIMARY_SHARE:
        # Only what was read on the client's clock: the server's own readings and its
        # counters (steps, preemptions, cache hits) are not the client's delays.
        pairs += [
            ("CL", effect, CLIENT_LINK)
            for effect in LATENCY_FINDINGS
            if effect in findings and findings[effect].basis == "client"
        ]
    for cause, effect, words in pairs:
        if cause in problems and effect in problems and effect not in findings[cause].explains:
            findings[cause].explains.append(effect)
            findings[cause].summary += f" This explains {effect}: {words}."
            findings[effect].summary += f" Explained by {cause}: {words}."


def _strength(f: Finding) -> float:
    return f.strength if f.strength is not None else 1.0


def _weight(f: Finding) -> float:
    """What a step-level finding is ranked by: the share of decode time it accounts for
    when it says, else its strength."""
    return f.impact if f.impact is not None else _strength(f)


def _place(h: str) -> int:
    """A finding's place in ``PRECEDENCE``; one registered later comes after the known."""
    return PRECEDENCE.index(h) if h in PRECEDENCE else len(PRECEDENCE)


def _order(ids: list[str], findings: dict[str, Finding]) -> list[str]:
    """Root causes (overload, memory, cache) first, in ``PRECEDENCE``; then the step-level
    hypotheses by the share of decode time each accounts for; a client that dominated
    last (what it explains is no longer a candidate, what it cannot explain outranks it)."""

    def key(h: str) -> tuple[int, float, int]:
        if h == "CL":  # the client explains client-clock findings; a server reading stands
            return (2, 0.0, 0)
        if h in PRECEDENCE and h not in STEP_LEVEL:
            return (0, 0.0, PRECEDENCE.index(h))
        # Step-level, and any hypothesis registered later (e.g. KV transfer): by weight.
        return (1, -_weight(findings[h]), _place(h))

    return sorted(ids, key=key)


def _why(top: Finding, rivals: list[Finding], explained: list[Finding]) -> str:
    parts = [f"{top.id} ({top.title.lower()}) is {top.status}"]
    if top.strength is not None:
        parts[0] += f" at {top.strength:.2g}× its threshold ({top.basis or 'model'} reading)"
    if explained:
        names = ", ".join(f"{f.id} ({f.status})" for f in explained)
        follow = "follows" if len(explained) == 1 else "follow"
        parts.append(f"it explains {names}, which {follow} from it")
    if top.impact is not None:
        parts.append(f"it accounts for about {percent(top.impact)} of the decode time")
    if rivals:
        names = ", ".join(
            f"{f.id} ({percent(f.impact)} of decode time)"
            if f.impact is not None and top.impact is not None
            else f"{f.id} at {_strength(f):.2g}×"
            for f in rivals
        )
        lead = (
            "root causes come before step-level findings"
            if top.id not in STEP_LEVEL
            else "it explains more of the decode time"
        )
        parts.append(f"it outranks {names} ({lead}); those stay open")
    elif not explained:
        parts.append("no other finding is supported")
    return "; ".join(parts) + "."


def _rivals(rival: Finding, top: Finding) -> bool:
    """Whether ``rival`` comes close to ``top`` (on impact when both have one)."""
    if rival.impact is not None and top.impact is not None:
        return rival.impact >= RIVAL_SHARE * top.impact
    return _strength(rival) >= RIVAL_SHARE * _strength(top)


def _confidence(top: Finding, rivals: list[Finding], client: ClientHealth) -> str:
    if not is_problem(top):
        return Confidence.WEAK
    if top.strength is not None and top.strength < NEAR_THRESHOLD:
        return Confidence.WEAK  # a reading this close to its threshold could fall either side
    if top.basis != "client":  # a slow client cannot have produced a server-side reading
        rivals = [r for r in rivals if r.id != "CL"]
    close = [r for r in rivals if _rivals(r, top)]
    server_read = top.basis in ("server", "model") and not (
        client.limited and client.share >= CAP_SHARE and top.basis != "server"
    )
    if server_read and _strength(top) >= STRONG_MARGIN and not close:
        return Confidence.STRONG
    if top.id == "CL" or close:
        return Confidence.WEAK if close else Confidence.MODERATE
    return Confidence.MODERATE


def rank(findings: dict[str, Finding], client: ClientHealth) -> Primary:
    """The primary finding of a diagnosis (``findings`` by id: H1–H4, OL, CL, PC)."""
    explained = {e for f in findings.values() for e in f.explains}
    problems = [
        hid for hid, f in findings.items() if is_problem(f) and (hid != "CL" or _strength(f) >= 1)
    ]
    candidates = _order([h for h in problems if h not in explained], findings)
    if candidates:
        top = findings[candidates[0]]
        rivals = [findings[h] for h in candidates[1:]]
        linked = [findings[e] for e in top.explains]
        secondary = [f.id for f in linked] + [f.id for f in rivals]
        return Primary(
            top.id, _confidence(top, rivals, client), _why(top, rivals, linked), secondary
        )
    weakened = _order(
        [h for h, f in findings.items() if f.status == Status.WEAKENED and h in LEADS],
        findings,
    )
    if weakened:
        top = findings[weakened[0]]
        return Primary(
            top.id,
            Confidence.WEAK,
            f"Nothing is supported; {top.id} ({top.title.lower()}) is the strongest lead, "
            "weakened: its readings point there only in part.",
            weakened[1:],
        )
    complete = not client.limited and all(
        f.status in (Status.NOT_SUPPORTED, Status.NOT_APPLICABLE, CacheHealth.AS_EXPECTED)
        for f in findings.values()
    )
    open_ = [h for h, f in findings.items() if f.status == Status.INCONCLUSIVE]
    why = "No finding is supported" + (
        ": every hypothesis had its evidence and it pointed away."
        if complete
        else "; "
        + (f"{', '.join(open_)} could not be judged" if open_ else "the client limited the run")
        + ", so this is a weak reading."
    )
    return Primary(NONE, Confidence.MODERATE if complete else Confidence.WEAK, why)


def ranked(findings: dict[str, Finding], client: ClientHealth) -> Primary:
    """Cap, link and rank (the findings are updated in place)."""
    apply_client_caps(findings, client)
    link(findings, client)
    return rank(findings, client)
