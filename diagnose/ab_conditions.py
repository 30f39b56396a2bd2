"""Did every arm of an A/B get the same load? The checks before any verdict.

A difference between arms means something only when the arms were driven alike. The
plan is the same by construction (one workload spec and seed), so what is checked is
what a run can still get wrong:

* **trials** — every trial ran to ``complete``, and every arm has the same number;
* **errors** — no trial lost more than ``errors`` of its requests (a failed request is
  missing from the latencies, and not at random);
* **prompt / output tokens** — each trial's totals over completed requests within
  ``tokens`` (relative) of the median trial: the same work was done;
* **request rate** — the achieved send rate of the open-loop requests (the scheduled
  arrivals) within ``rate`` (relative) of the median trial. Closed-loop users send when
  answered, so their rate is an outcome of the server's speed, not a condition;
* **hit rate** — the server-reported prefix-cache hit rate within ``hit_rate``
  (absolute) of the median trial: cache warmth was matched. Unknown when the server
  reports no cached tokens; reported by some arms only is a mismatch;
* **client** — the load generator's own health alike in every arm: the arms' median
  event-loop lag p99 within ``loop_lag`` seconds of each other (a late loop stamps tokens
  late), and the shares of trials with its CPU saturated (as ``summary.client`` judges
  it) within ``client``. The dispatch lag behind ``summary.client.limited`` is reported
  but not judged: a request counts as sent when its body is written, so a server slow to
  read (a busy event loop, a starved process) delays it too, and that is the arm's
  behaviour, not the client's. On a machine the client shares with the server, an arm
  that keeps the CPU busier also slows the client's loop: a difference beyond
  ``loop_lag`` then refuses the verdict, since it lands in that arm's latencies;
* **engine pace** — for a server that publishes its step lateness (the embedded engine,
  ``probes.engine_pace``), that the machine did not hold the modelled engine back unevenly:
  a trial's share is its step lateness p99 over its ITL p99 (a late step's delay lands in
  its tokens' gaps); between any two arms, the median over rounds of their trials' shares
  in that round (run back to back, ABAB: a spell of load on the machine falls on both)
  within ``engine_lateness`` (10 %), so that lateness cannot move their ITL p99 ratio by
  the smallest change the A/B calls (lateness common to both arms largely cancels in the
  ratio; what one arm has more of, round after round, enters it with its sign). Paired,
  not each arm's median against the other's: a spell that falls on one trial of a round
  is the moment's, not the arm's (seen in an A/A: 39, 33, 10 % against 34, 10, 19 % —
  medians 14 points apart, rounds a median 5), and that spread between trials is in the
  verdict's interval already (trials as units). No trial's share more than twice the
  tolerance (20 points) above the median share of all trials (one starved trial, whatever
  the other arm did: the rounds' median would hide it); and none beyond
  ``probes.engine_pace.DILUTED_SHARE`` (half its tail the machine's) or twice the
  tolerance, whichever is larger. Lateness every trial shares is
  not refused below that: it dilutes a ratio (by about the share) but cannot make one —
  on an idle 2-core machine a fast configuration's trials (ITL p99 ~25 ms) sit at 10–25 %
  alike, and refusing them refused healthy A/As. A starved engine is not the client's
  fault: the client checks stay calm while its stalls land in one arm's tail. Unknown,
  not failed, for a server that publishes none (a real vLLM or SGLang keeps no modelled
  schedule).

Any failed check refuses the verdict; each says what it saw and the tolerance it used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from probes.client_limits import CPU_SATURATION_SHARE, DISPATCH_LAG_LIMIT_S
from probes.engine_pace import DILUTED_SHARE, ITL_KEY, LATENESS_SHARE, engine_pace
from probes.latency import completed_mask
from runfmt.abresult import Check, Conditions, Tolerances
from runfmt.codec import frozen_map
from runfmt.metrics import AB_SLO_ITL, CLIENT_DISPATCH_LAG, DISPATCH_LAG, by_key, json_name
from runfmt.names import RUN_JSON
from runfmt.run import open_run
from runfmt.summary import Summary
from runfmt.summary_sections import ClientSection
from runfmt.units import fmt_seconds
from runtime.quantiles import finite_number
from workloads.errors import InputError

FLAG = "--tolerance"


#: The tolerances unless ``--tolerance`` says otherwise (the module doc says what each is).
DEFAULT_TOLERANCES = Tolerances(
    tokens=0.02,
    rate=0.10,
    hit_rate=0.05,
    errors=0.01,
    client=0.5,
    loop_lag=DISPATCH_LAG_LIMIT_S,
    engine_lateness=LATENESS_SHARE,
)


def parse_tolerances(items: Iterable[str]) -> Tolerances:
    """``KEY=VALUE`` items (``rate=0.2``) over the defaults."""
    known = {f.name for f in fields(Tolerances)}
    values: dict[str, float] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in known:
            raise InputError(
                FLAG, f"{item!r} is not KEY=VALUE with KEY one of {', '.join(sorted(known))}"
            )
        try:
            value = float(text)
        except ValueError:
            raise InputError(FLAG, f"{key}={text!r} is not a number") from None
        if not (math.isfinite(value) and value >= 0):
            raise InputError(FLAG, f"{key}={text!r} must be a number >= 0")
        values[key] = value
    return replace(DEFAULT_TOLERANCES, **values)


@dataclass(frozen=True)
class TrialFacts:
    """What the checks need from one trial's run directory."""

    arm: int
    status: str
    requests: int
    failed: int
    prompt_tokens: float
    output_tokens: float
    open_loop_rate: float | None
    observed_hit_rate: float | None
    cpu_saturated: bool
    loop_lag_p99_s: float | None
    dispatch_lag_p99_s: float | None
    #: The engine's step lateness p99 and mean, and the trial's ITL p99 (seconds; the
    #: lateness ``None`` when the server publishes none).
    lateness_p99_s: float | None = None
    lateness_mean_s: float | None = None
    itl_p99_s: float | None = None
    #: The trial's round within its arm (1-based; trials of one round ran back to back).
    round: int = 0

    @classmethod
    def read(
        cls, arm: int, run_dir: Path, open_loop_ids: frozenset[str], round: int = 0
    ) -> TrialFacts:
        if not (run_dir / RUN_JSON).exists():  # the trial never started (its server died)
            return cls(arm, "failed", 0, 0, 0.0, 0.0, None, None, False, None, None, round=round)
        run = open_run(run_dir, "trial")
        status, summary = run.status, run.summary
        requests = run.tables.measured
        done = requests[completed_mask(requests)]
        sections = summary or Summary()
        counts, client = sections.requests, sections.client
        pace = engine_pace(sections)
        return cls(
            arm=arm,
            status=status if summary else "failed",
            requests=int(len(requests) if counts.total is None else counts.total),
            failed=int(len(requests) - len(done) if counts.failed is None else counts.failed),
            prompt_tokens=_total(done, "prompt_tokens"),
            output_tokens=_total(done, "output_tokens"),
            open_loop_rate=_send_rate(requests, open_loop_ids),
            observed_hit_rate=finite_number(sections.prefix.observed_hit_rate),
            cpu_saturated=_saturated(client),
            loop_lag_p99_s=finite_number(client.loop_lag.get("p99") if client.loop_lag else None),
            dispatch_lag_p99_s=finite_number(client.dispatch_lag_p99_s),
            lateness_p99_s=pace.lateness_p99_s if pace is not None else None,
            lateness_mean_s=pace.lateness_mean_s if pace is not None else None,
            itl_p99_s=pace.itl_p99_s if pace is not None else None,
            round=round,
        )

    @property
    def lateness_share(self) -> float | None:
        """Step lateness p99 over ITL p99 (``None`` when either is unknown)."""
        if self.lateness_p99_s is None or not self.itl_p99_s:
            return None
        return self.lateness_p99_s / self.itl_p99_s

    @property
    def error_share(self) -> float:
        return self.failed / self.requests if self.requests else 1.0


def _saturated(client: ClientSection) -> bool:
    """Whether the client's CPU stayed saturated (``summary.client``'s own rule)."""
    cpu = client.cpu_sustained_max
    return cpu is not None and cpu >= CPU_SATURATION_SHARE


def _total(frame: pd.DataFrame, column: str) -> float:
    if column not in frame.columns:
        return 0.0
    return float(np.nansum(pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)))


def _send_rate(requests: pd.DataFrame, ids: frozenset[str]) -> float | None:
    """Open-loop requests sent per second, between the first and the last one sent."""
    if not ids or requests.empty:
        return None
    sent = pd.to_numeric(requests.loc[requests["id"].isin(ids), "sent_s"], errors="coerce")
    times = np.sort(sent.to_numpy(dtype=float)[np.isfinite(sent.to_numpy(dtype=float))])
    if times.size < 2 or times[-1] <= times[0]:
        return None
    return float((times.size - 1) / (times[-1] - times[0]))


def _by_arm(
    facts: Sequence[TrialFacts], labels: Sequence[str], value: Any
) -> Mapping[str, tuple[Any, ...]]:
    return frozen_map(
        {label: tuple(value(f) for f in facts if f.arm == i) for i, label in enumerate(labels)}
    )


def _fmt(value: float, relative: bool) -> str:
    return f"{value:.1%}" if relative else f"{value:.3f}"


def _spread(
    name: str,
    facts: Sequence[TrialFacts],
    labels: Sequence[str],
    value: Any,
    tolerance: float,
    *,
    relative: bool,
) -> Check:
    """Every trial's value within ``tolerance`` of the median trial's."""
    values = _by_arm(facts, labels, value)
    known = [v for f in facts if (v := value(f)) is not None]
    bound = f"±{_fmt(tolerance, relative)} of the median trial"
    if not known:
        return Check(name, None, "not measured in any trial", bound, values)
    if len(known) < len(facts):
        return Check(name, False, "known in some trials only", bound, values)
    centre = float(np.median(known))
    scale = abs(centre) if relative else 1.0
    deviation = max(abs(v - centre) for v in known) / scale if scale else 0.0
    ok = deviation <= tolerance
    seen = f"largest deviation {_fmt(deviation, relative)} from the median {centre:.4g}"
    return Check(name, ok, seen if ok else f"{seen} exceeds {bound}", bound, values)


def _trials_check(facts: Sequence[TrialFacts], labels: Sequence[str], planned: int) -> Check:
    values = _by_arm(facts, labels, lambda f: f.status)
    short = [label for label, v in values.items() if len(v) < planned]
    unfinished = sorted({f.status for f in facts if f.status != "complete"})
    bound = f"{planned} complete trials per arm"
    if short:
        return Check("trials", False, f"arms {', '.join(short)} have fewer trials", bound, values)
    if unfinished:
        return Check("trials", False, f"trials ended {', '.join(unfinished)}", bound, values)
    return Check("trials", True, f"{planned} complete trials per arm", bound, values)


def _errors_check(facts: Sequence[TrialFacts], labels: Sequence[str], limit: float) -> Check:
    values = _by_arm(facts, labels, lambda f: f.failed)
    worst = max((f.error_share for f in facts), default=0.0)
    bound = f"at most {limit:.1%} of a trial's requests failed"
    failed = sum(f.failed for f in facts)
    if worst > limit:
        return Check(
            "errors",
            False,
            f"{failed} failed requests, up to {worst:.1%} in a trial",
            bound,
            values,
        )
    return Check("errors", True, f"{failed} failed requests", bound, values)


def _ms(values: Sequence[float]) -> str:
    return fmt_seconds(float(np.median(values))) if values else "unknown"


def _client_check(facts: Sequence[TrialFacts], labels: Sequence[str], tol: Tolerances) -> Check:
    values = _by_arm(
        facts,
        labels,
        lambda f: {
            "loop_lag_p99_s": f.loop_lag_p99_s,
            "cpu_saturated": f.cpu_saturated,
            json_name(CLIENT_DISPATCH_LAG): f.dispatch_lag_p99_s,
        },
    )
    bound = (
        f"median loop lag p99 within {tol.loop_lag * 1e3:g} ms, shares of CPU-saturated "
        f"trials within {tol.client:.0%}, between arms"
    )
    if not facts:
        return Check("client", None, "no trials", bound, values)
    loops = {k: [v["loop_lag_p99_s"] for v in vs if v["loop_lag_p99_s"] is not None]
             for k, vs in values.items()}  # fmt: skip
    medians = [float(np.median(v)) for v in loops.values() if v]
    shares = [sum(v["cpu_saturated"] for v in vs) / len(vs) for vs in values.values() if vs]
    lags = [f.dispatch_lag_p99_s for f in facts if f.dispatch_lag_p99_s is not None]
    seen = "loop lag p99 median " + ", ".join(f"{_ms(v)} ({k})" for k, v in loops.items())
    seen += f"; CPU saturated in {sum(f.cpu_saturated for f in facts)} of {len(facts)} trials"
    if lags:
        lag = f"{DISPATCH_LAG.named('p99')} up to {DISPATCH_LAG.format(max(lags))}"
        seen += f"; {lag} (not judged)"
    loop_gap = max(medians) - min(medians) if medians else 0.0
    if loop_gap > tol.loop_lag or max(shares) - min(shares) > tol.client:
        return Check("client", False, f"{seen}: unevenly between arms", bound, values)
    return Check("client", True, seen, bound, values)


def _hit_rate_check(facts: Sequence[TrialFacts], labels: Sequence[str], tolerance: float) -> Check:
    check = _spread(
        "hit_rate", facts, labels, lambda f: f.observed_hit_rate, tolerance, relative=False
    )
    if check.matched is None:
        return replace(check, detail="unknown: the server reported no cached tokens")
    return check


def _engine_pace_check(
    facts: Sequence[TrialFacts], labels: Sequence[str], bound: float | None
) -> Check:
    """The engine pace of the module docstring (``bound``: ``engine_lateness``)."""
    values = _by_arm(
        facts,
        labels,
        lambda f: {
            "lateness_p99_s": f.lateness_p99_s,
            "lateness_mean_s": f.lateness_mean_s,
            json_name(AB_SLO_ITL): f.itl_p99_s,
        },
    )
    limit = LATENESS_SHARE if bound is None else bound
    cap = max(DILUTED_SHARE, 2 * limit)
    itl_p99 = by_key(ITL_KEY).named("p99")  # what lateness is weighed against, as named
    tolerance = (
        f"each trial's step lateness p99 within {2 * limit:.0%} points of the trials' median "
        f"share of their {itl_p99} and within {cap:.0%} of it, the arms' medians within "
        f"{limit:.0%} of each other"
    )
    published = [f for f in facts if f.lateness_p99_s is not None]
    if not published:
        why = "unknown: the server publishes no step lateness (it keeps no modelled schedule)"
        return Check("engine_pace", None, why, tolerance, values)
    if len(published) < len(facts):
        why = "step lateness known in some trials only"
        return Check("engine_pace", False, why, tolerance, values)
    weighed = [(f, share) for f in facts if (share := f.lateness_share) is not None]
    if len(weighed) < len(facts):
        why = f"unknown: a trial has no {itl_p99} to weigh its step lateness against"
        return Check("engine_pace", None, why, tolerance, values)
    typical = float(np.median([share for _, share in weighed]))
    late = [(f, s) for f, s in weighed if s - typical > 2 * limit or s > cap]
    if late:
        worst, share = max(late, key=lambda pair: pair[1])
        beyond = (
            f"beyond {cap:.0%}"
            if share > cap
            else f"{100 * (share - typical):.0f} points above the trials' median {typical:.0%}"
        )
        detail = (
            f"the engine ran late in {len(late)} of {len(facts)} trials: step lateness p99 "
            f"up to {fmt_seconds(worst.lateness_p99_s or 0.0)} ({share:.0%} of that trial's "
            f"{itl_p99} {fmt_seconds(worst.itl_p99_s or 0.0)}, arm {labels[worst.arm]}), "
            f"{beyond}"
        )
        return Check("engine_pace", False, detail, tolerance, values)
    shares = {
        i: [share for f, share in sorted(weighed, key=lambda p: p[0].round) if f.arm == i]
        for i in range(len(labels))
    }
    seen = "step lateness p99 median " + ", ".join(
        f"{float(np.median(shares[i])):.1%} of the {itl_p99} ({label})"
        for i, label in enumerate(labels)
        if shares[i]
    )
    uneven = _uneven_rounds(shares, limit)
    if uneven is not None:
        later, earlier, gap = uneven
        rounds = "; ".join(
            f"{labels[i]} " + ", ".join(f"{s:.0%}" for s in shares[i]) for i in (later, earlier)
        )
        why = (
            f"the engine's lateness was uneven between arms: {labels[later]}'s trials ran a "
            f"median {100 * gap:.0f} points of the {itl_p99} later than {labels[earlier]}'s "
            f"beside them, round by round ({rounds})"
        )
        return Check("engine_pace", False, why, tolerance, values)
    return Check("engine_pace", True, seen, tolerance, values)


def _uneven_rounds(
    shares: Mapping[int, list[float]], limit: float
) -> tuple[int, int, float] | None:
    """The pair of arms (later, earlier, gap) whose shares, paired round by round (the
    r-th trial of each, run back to back), differ by a median beyond ``limit``; ``None``
    when no pair does."""
    worst: tuple[int, int, float] | None = None
    arms = [i for i, s in shares.items() if s]
    for a in arms:
        for b in arms:
            rounds = min(len(shares[a]), len(shares[b]))
            if a == b or not rounds:
                continue
            gap = float(np.median(np.subtract(shares[a][:rounds], shares[b][:rounds])))
            if gap > limit and (worst is None or gap > worst[2]):
                worst = (a, b, gap)
    return worst


def check_conditions(
    facts: Sequence[TrialFacts],
    labels: Sequence[str],
    trials_per_arm: int,
    tolerances: Tolerances,
) -> Conditions:
    """Every check of the module docstring over the trials of all arms."""
    rate = _spread(
        "request_rate",
        facts,
        labels,
        lambda f: f.open_loop_rate,
        tolerances.rate,
        relative=True,
    )
    if rate.matched is None:
        rate = replace(rate, detail="closed loop: the rate is an outcome (users are matched)")
    return Conditions.of(
        [
            _trials_check(facts, labels, trials_per_arm),
            _errors_check(facts, labels, tolerances.errors),
            _spread(
                "prompt_tokens",
                facts,
                labels,
                lambda f: f.prompt_tokens,
                tolerances.tokens,
                relative=True,
            ),
            _spread(
                "output_tokens",
                facts,
                labels,
                lambda f: f.output_tokens,
                tolerances.tokens,
                relative=True,
            ),
            rate,
            _hit_rate_check(facts, labels, tolerances.hit_rate),
            _client_check(facts, labels, tolerances),
            _engine_pace_check(facts, labels, tolerances.engine_lateness),
        ]
    )
