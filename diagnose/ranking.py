"""One primary finding, its confidence, why it outranks the others, and what it explains.

The checklist judges each finding on its own; a reader needs one answer. The ranking
reads each hypothesis's declaration (``diagnose.registry``): nothing here names one.

1. **The client's share.** When the client limited the run, a finding that reads
   latency (``reads_latency``) on the client's clock (``basis == "client"``) is capped
   at inconclusive if the client's share of that latency reaches
   ``client_limited.CAP_SHARE``; otherwise its summary says how much of the latency is
   the client's. A finding read on the server's clock stands.
2. **Links.** A finding that produces another's symptom explains it (its declared
   ``explains``, each link with its condition), and the explained one becomes
   secondary: thrashing, a lost prefix or caching off re-create prefills that H1 blames,
   and overload too when the reuse the workload allowed would have brought the offered
   work within what was served; a pool smaller than the prefixes' working set is also
   the pool the running requests ran out of (H4); preemptions recompute sequences as
   prefills; overload fills H4's queue; a client whose delays dominate explains every
   latency finding read on the client's clock. A finding that explains others and
   declares a ``root_cause`` names that one cause in its summary and in ``why``.
3. **Candidates** are the supported findings no other supported finding explains,
   ranked by **the latency each explains** (``Finding.cost_s``, request-seconds:
   ``diagnose.costs``) — prefill tokens recomputed by thrashing against tokens
   recomputed by preemptions, seconds queued, the decode time the stalls or the host
   add. When a candidate's cost is unknown they cannot be weighed, and the declared
   order stands: root causes first (``precedence``), then the step-level findings by
   the share of the decode time each accounts for (``Finding.impact``), else by
   strength. A client that dominated comes last either way: what it explains is no
   longer a candidate, and a server-side reading it cannot explain outranks it. With
   none supported, the strongest weakened hypothesis that ``may_lead`` is the primary at
   weak confidence; with none at all, ``none``.
4. **Confidence**: ``strong`` when the deciding figure is read on the server or from the
   server's counters, at least ``STRONG_MARGIN`` past its threshold, with no rival close
   to it (on the latency explained when both say, else on the share of decode time or
   the strength); ``moderate`` when supported but nearer the threshold, read on the
   client, or beside a rival; ``weak`` for a weakened primary, a reading within
   ``NEAR_THRESHOLD`` of its threshold, or a run where nothing points anywhere but the
   evidence was incomplete.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from diagnose.client_limited import CAP_SHARE, PRIMARY_SHARE, ClientHealth
from diagnose.registry import Declaration, declaration, declared
from diagnose.words import percent
from runfmt.diagnosis import CacheHealth, Finding, Primary, Status

#: How far past its threshold a server-side reading must be to count as strong.
STRONG_MARGIN = 1.5
#: Strength under which a supported primary is only weak: within 10 % of its threshold.
NEAR_THRESHOLD = 1.1
#: A rival within this factor of the primary's weight makes it moderate at best.
RIVAL_SHARE = 0.67
#: Cache verdicts that are findings (a problem), not health.
CACHE_PROBLEMS = (CacheHealth.THRASHING, CacheHealth.IDENTITY_MISMATCH, CacheHealth.CACHING_OFF)
NONE = "none"


class Confidence:
    STRONG = "strong"
    MODERATE = "moderate"
    WEAK = "weak"


def _declared(hid: str) -> Declaration | None:
    return declaration(hid)


def _role(hid: str) -> str:
    d = _declared(hid)
    return d.role if d is not None else "step"  # an undeclared finding is weighed, not placed


def is_problem(f: Finding) -> bool:
    """A finding that points at a cause: supported, or a cache verdict that is a problem
    (and matters: a cache that could not have hit much is no cause)."""
    if f.status == Status.SUPPORTED:
        return True
    return f.status in CACHE_PROBLEMS and (f.strength is None or f.strength >= 1)


def _reads_latency(hid: str) -> bool:
    d = _declared(hid)
    return d is not None and d.reads_latency


def apply_client_caps(findings: Mapping[str, Finding], client: ClientHealth) -> dict[str, Finding]:
    """The findings with the latency findings of a client-limited run capped or annotated."""
    out = dict(findings)
    if not client.limited:
        return out
    for hid, f in findings.items():
        if not _reads_latency(hid) or f.status not in (Status.SUPPORTED, Status.WEAKENED):
            continue
        if f.basis == "client" and client.share >= CAP_SHARE:
            summary = f"Capped at inconclusive (was {f.status}): {client.note()} {f.summary}"
            out[hid] = replace(f, summary=summary, status=Status.INCONCLUSIVE)
        else:
            out[hid] = replace(f, summary=f"{f.summary} {client.note()}")
    return out


def _pairs(findings: Mapping[str, Finding], client: ClientHealth) -> list[tuple[str, str, str]]:
    """Every (cause, effect, words) the declarations allow on these findings."""
    pairs = []
    for d in declared():
        if d.id not in findings:
            continue
        for effect, link_ in d.explains.items():
            if link_.when is None or link_.when(findings):
                pairs.append((d.id, effect, link_.words))
        if d.explains_client_clock and client.share >= PRIMARY_SHARE:
            # Only what was read on the client's clock: the server's own readings and its
            # counters (steps, preemptions, cache hits) are not the client's delays.
            pairs += [
                (d.id, effect, d.explains_client_clock)
                for effect, f in findings.items()
                if _reads_latency(effect) and f.basis == "client"
            ]
    return pairs


def link(findings: Mapping[str, Finding], client: ClientHealth) -> dict[str, Finding]:
    """The findings with each one's ``explains`` filled with the problems it produces, and
    the one root cause of a finding that explains others named when it declares one."""
    out = dict(findings)
    problems = {hid for hid, f in findings.items() if is_problem(f)}
    for cause, effect, words in _pairs(findings, client):
        if cause in problems and effect in problems and effect not in out[cause].explains:
            was = out[cause]
            out[cause] = replace(
                was,
                explains=[*was.explains, effect],
                summary=f"{was.summary} This explains {effect}: {words}.",
            )
            out[effect] = replace(
                out[effect], summary=f"{out[effect].summary} Explained by {cause}: {words}."
            )
    for hid, f in out.items():
        cause = root_cause(f)
        if cause is not None:
            produces = ", ".join(f.explains)
            out[hid] = replace(
                f, summary=f"{f.summary} One root cause: {cause}; it produces {produces}."
            )
    return out


def root_cause(f: Finding) -> str | None:
    """The one cause a finding that explains others names (its declared ``root_cause``)."""
    d = _declared(f.id)
    if d is None or d.root_cause is None or not f.explains:
        return None
    return d.root_cause(f)


def _strength(f: Finding) -> float:
    return f.strength if f.strength is not None else 1.0


def _weight(f: Finding) -> float:
    """What a step-level finding is ranked by without costs: the share of decode time it
    accounts for when it says, else its strength."""
    return f.impact if f.impact is not None else _strength(f)


def _precedence(h: str) -> int:
    d = _declared(h)
    return d.precedence if d is not None else 1_000


def _by_cost(ids: list[str], findings: dict[str, Finding]) -> bool:
    """Whether the candidates (the client aside) can be ranked by the latency explained."""
    weighed = [h for h in ids if _role(h) != "client"]
    return len(weighed) > 1 and all(findings[h].cost_s is not None for h in weighed)


def _order(ids: list[str], findings: dict[str, Finding]) -> list[str]:
    """By the latency explained when every candidate says (the client last); else root
    causes first in their declared precedence, then the step-level findings by the share
    of decode time each accounts for, the client last."""
    by_cost = _by_cost(ids, findings)

    def key(h: str) -> tuple[int, float, int]:
        role = _role(h)
        if role == "client":
            return (2, 0.0, 0)
        if by_cost:
            return (0, -float(findings[h].cost_s or 0.0), _precedence(h))
        if role == "root":
            return (0, 0.0, _precedence(h))
        return (1, -_weight(findings[h]), _precedence(h))

    return sorted(ids, key=key)


def _cost_text(f: Finding) -> str:
    return f"{f.cost_s:.3g} request-s" if f.cost_s is not None else "unknown"


def _why(top: Finding, rivals: list[Finding], explained: list[Finding], by_cost: bool) -> str:
    parts = [f"{top.id} ({top.title.lower()}) is {top.status}"]
    if top.strength is not None:
        parts[0] += f" at {top.strength:.2g}× its threshold ({top.basis or 'model'} reading)"
    if explained:
        # what each explained finding costs on its own counts: the root cause's own cost
        # (its recompute, say) can be the smaller part of what follows from it
        names = ", ".join(
            f"{f.id} ({f.status}" + (f", {_cost_text(f)})" if f.cost_s is not None else ")")
            for f in explained
        )
        follow = "follows" if len(explained) == 1 else "follow"
        parts.append(f"it explains {names}, which {follow} from it")
        cause = root_cause(top)
        if cause is not None:
            parts.append(f"one root cause: {cause}")
    if top.cost_s is not None:
        lead = "by itself it costs" if explained else "it explains"
        parts.append(f"{lead} about {_cost_text(top)} of latency ({top.cost_how})")
    if top.impact is not None:
        parts.append(f"it accounts for about {percent(top.impact)} of the decode time")
    if rivals:
        if by_cost:
            names = ", ".join(f"{f.id} ({_cost_text(f)})" for f in rivals)
            lead = "it explains more latency"
        else:
            names = ", ".join(
                f"{f.id} ({percent(f.impact)} of decode time)"
                if f.impact is not None and top.impact is not None
                else f"{f.id} at {_strength(f):.2g}×"
                for f in rivals
            )
            lead = (
                "root causes come before step-level findings"
                if _role(top.id) == "root"
                else "it explains more of the decode time"
            )
        parts.append(f"it outranks {names} ({lead}); those stay open")
    elif not explained:
        parts.append("no other finding is supported")
    return "; ".join(parts) + "."


def _rivals(rival: Finding, top: Finding) -> bool:
    """Whether ``rival`` comes close to ``top``: on the latency explained when both say,
    else on impact when both have one, else on strength."""
    if rival.cost_s is not None and top.cost_s is not None:
        return rival.cost_s >= RIVAL_SHARE * top.cost_s
    if rival.impact is not None and top.impact is not None:
        return rival.impact >= RIVAL_SHARE * top.impact
    return _strength(rival) >= RIVAL_SHARE * _strength(top)


def _confidence(top: Finding, rivals: list[Finding], client: ClientHealth) -> str:
    if not is_problem(top):
        return Confidence.WEAK
    if top.strength is not None and top.strength < NEAR_THRESHOLD:
        return Confidence.WEAK  # a reading this close to its threshold could fall either side
    if top.basis != "client":  # a slow client cannot have produced a server-side reading
        rivals = [r for r in rivals if _role(r.id) != "client"]
    close = [r for r in rivals if _rivals(r, top)]
    server_read = top.basis in ("server", "model") and not (
        client.limited and client.share >= CAP_SHARE and top.basis != "server"
    )
    if server_read and _strength(top) >= STRONG_MARGIN and not close:
        return Confidence.STRONG
    if _role(top.id) == "client" or close:
        return Confidence.WEAK if close else Confidence.MODERATE
    return Confidence.MODERATE


def _may_lead(hid: str) -> bool:
    d = _declared(hid)
    return d is None or d.may_lead


def rank(findings: dict[str, Finding], client: ClientHealth) -> Primary:
    """The primary finding of a diagnosis (``findings`` by id)."""
    explained = {e for f in findings.values() for e in f.explains}
    problems = [
        hid
        for hid, f in findings.items()
        if is_problem(f) and (_role(hid) != "client" or _strength(f) >= 1)
    ]
    ids = [h for h in problems if h not in explained]
    candidates = _order(ids, findings)
    if candidates:
        top = findings[candidates[0]]
        rivals = [findings[h] for h in candidates[1:]]
        linked = [findings[e] for e in top.explains]
        secondary = [f.id for f in linked] + [f.id for f in rivals]
        why = _why(top, rivals, linked, _by_cost(ids, findings))
        return Primary(top.id, _confidence(top, rivals, client), why, tuple(secondary))
    weakened = _order(
        [h for h, f in findings.items() if f.status == Status.WEAKENED and _may_lead(h)],
        findings,
    )
    if weakened:
        top = findings[weakened[0]]
        return Primary(
            top.id,
            Confidence.WEAK,
            f"Nothing is supported; {top.id} ({top.title.lower()}) is the strongest lead, "
            "weakened: its readings point there only in part.",
            tuple(weakened[1:]),
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


def ranked(
    findings: Mapping[str, Finding], client: ClientHealth
) -> tuple[dict[str, Finding], Primary]:
    """Cap, link and rank: the findings as capped and linked, and the primary one."""
    final = link(apply_client_caps(findings, client), client)
    return final, rank(final, client)
