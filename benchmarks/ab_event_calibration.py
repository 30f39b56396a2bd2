"""How often ``diagnose ab``'s decision is wrong: A/A winners, and planted stalls found.

Data: virtual-time runs of the embedded engine (``simengine.driver.VirtualDriver``: the
engine's scheduler and cost model on a simulated clock) serving the ``interference`` plan
``diagnose ab`` sends — closed-loop decode streams and long prompts dropped into them.
An experiment is two arms of ``--trials`` trials each, run ABAB…, every trial its own
seed (so its long prompts land at other moments of the decode streams: an A/B's trials
share one plan, which only narrows the spread, so this is the harder case). Each long
prompt is one stall event (``diagnose.ab_events``), measured from the token times as
``diagnose ab`` measures them from a trial's chunks.

Each experiment goes through the whole analysis ``diagnose ab`` runs on its trials
(``diagnose.ab.judge``: every comparison, the decision rule of ``ab_verdict`` at
``--min-effect`` 10 %, no SLO). An A/A experiment is two arms of one chunk size: any
winner is wrong. A planted effect multiplies the second arm's per-event stall (worst
decode gap per prefill) by f (1.5×, 2×, 3×) and leaves the rest alone: the first arm
should win, on the stall. Printed per events-per-arm and chunk size, with 95 % binomial
(Clopper–Pearson) intervals: the share of A/A experiments that named a winner (and which
metric named it), the share whose per-event stall comparison alone was significant, and
per planted factor the share where the first arm won. Goals: A/A winners ≤ 5 % of the
whole decision, planted 2× found in ≥ 90 % at 12 events per arm.

``--drawn`` draws each experiment's shape at random instead (GPU, model, streams, stream
and prompt lengths, rate, budget 256–4096): a shape whose streams end before its long
prompts has fewer than 10 events per arm and is judged on pooled gaps, where a planted
per-event stall is not what decides.

Run: ``.venv/bin/python benchmarks/ab_event_calibration.py [--events 6,12,24]
[--experiments 100] [--trials 3] [--chunks 256,8192] [--planted 1.5,2,3] [--drawn]``,
about 2–3 s per experiment on one core. The virtual clock has no machine to make trials
differ (no load spells, no late steps): A/As on the wall clock (``diagnosis_accuracy.py
--only aa``) are where between-trial variance, which the trials-as-units rule carries,
shows most.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from diagnose.ab import AbSettings, judge, make_arms
from diagnose.ab_effect import SIGNIFICANT, effect_status
from diagnose.ab_events import EVENT_STALL, scaled
from diagnose.ab_metrics import TrialSamples
from diagnose.compare import RunSamples
from diagnose.stats import MIN_UNITS
from perfmodel.config import EngineConfig
from probes.stall_events import StallEvents
from runfmt.abresult import Conditions
from session.sim_workload import from_plan
from simengine.core import EngineCore
from simengine.driver import VirtualDriver
from workloads.build import build_plan
from workloads.spec import load_spec

MIN_EFFECT = 0.10
#: The Must-show A/B's traffic: six decode streams of 400 tokens, 12k-token prompts.
TRAFFIC = {"concurrency": 6, "stream_output_len": 400, "long_prompt_len": 12000, "rate": 0.5}


@dataclasses.dataclass(frozen=True)
class Planted(TrialSamples):
    """A trial whose stall events' worst decode gaps are ``factor`` times what was measured."""

    factor: float = 1.0

    def events(self, kind: str | None) -> StallEvents:
        return scaled(super().events(kind), EVENT_STALL, self.factor)


@dataclasses.dataclass(frozen=True)
class Shape:
    """What both arms run: the ``interference`` parameters, GPU, model and chunk budget."""

    traffic: dict
    gpu: str
    model: str
    chunk: int

    def describe(self) -> str:
        t = self.traffic
        return (
            f"{self.gpu} {self.model} budget {self.chunk}, {t['concurrency']} streams of "
            f"{t['stream_output_len']} tokens, {t['long_prompt_len']}-token prompts"
        )


def drawn(rng: random.Random) -> Shape:
    """A shape drawn at random, as ``diagnosis_accuracy.py``'s A/A draws them and wider:
    GPU, model, streams, stream and prompt lengths, chunk budget."""
    traffic = {
        "concurrency": rng.choice((4, 6, 8)),
        "stream_output_len": rng.choice((150, 250, 400)),
        "long_prompt_len": rng.randrange(4000, 14001, 1000),
        "rate": rng.choice((0.5, 1.0)),
    }
    gpu = rng.choice(("h100-sxm", "h200", "a100-80gb"))
    model = rng.choice(("llama-3.1-8b", "qwen2.5-7b", "mistral-7b"))
    return Shape(traffic, gpu, model, rng.choice((256, 512, 1024, 2048, 4096)))


def simulate_trial(shape: Shape, events: int, seed: int) -> TrialSamples:
    """One virtual-time trial of ``events`` stall events at budget ``chunk``, as
    ``diagnose ab`` reads a trial (its requests and one token per chunk). The plan has
    one long prompt more: its first arrives at 0 s with the decode streams, before their
    first gap, so nothing stalls beside it (``alone``, not an event)."""
    # the decode streams outlast the injections: ~2 s of each stream's 400 tokens per prompt
    streams = math.ceil(events * 2.0 / 3.0 * 400 / shape.traffic["stream_output_len"]) + 2
    spec = load_spec(
        "interference",
        shape.traffic | {"num_requests": events + 1, "seed": seed, "stream_requests": streams},
    )
    plan = build_plan(spec)
    config = EngineConfig(gpu=shape.gpu, model=shape.model, max_num_batched_tokens=shape.chunk)
    arrivals, release = from_plan(plan, config.vocab_size, config.model).start()
    result = VirtualDriver(EngineCore(config)).run(arrivals, record_steps=False, release=release)
    planned = {r.id: r for r in plan.requests if not r.warmup}
    rows, chunks = [], []
    for rid, timing in result.requests.items():
        if rid not in planned:
            continue
        times = timing.token_times
        rows.append({
            "id": rid, "kind": planned[rid].kind, "prompt_tokens": len(planned[rid].prompt),
            "intended_s": timing.arrival_s, "sent_s": timing.arrival_s,
            "first_token_s": times[0] if times else np.nan,
            "end_s": times[-1] if times else np.nan, "output_tokens": len(times),
            "status": "ok" if times and timing.error is None else "error",
        })  # fmt: skip
        chunks += [(rid, t, 1) for t in times]
    requests = pd.DataFrame(rows)
    table = pd.DataFrame(chunks, columns=["request_id", "t_s", "n_tokens"])
    run = RunSamples.of_tables(Path(f"seed-{seed}"), None, requests, table)
    return TrialSamples.of_run(run, requests)


def experiment(
    shape: Shape, trials: int, per_trial: int, seed: int, factors: tuple[float, ...]
) -> tuple[int, dict[float, tuple[str | None, str, str]]]:
    """One A/A experiment's trials (ABAB…, each its own seed), judged as is and with each
    planted factor on the second arm: the fewest events an arm had, and per factor (the
    winner's label or ``None``, the metrics that decided, the per-event stall comparison
    as the verdict reads it)."""
    arms = make_arms([shape.chunk, shape.chunk], ["virtual", "virtual"])
    runs = [
        [simulate_trial(shape, per_trial, seed + 2 * r + arm) for r in range(trials)]
        for arm in range(2)
    ]
    settings = AbSettings(trials=trials, reference=0, seed=seed)
    out, fewest = {}, per_trial * trials
    for factor in factors:
        planted = [Planted(**vars(t), factor=factor) for t in runs[1]]
        judged = judge(arms, [runs[0], planted], settings, Conditions())
        stall = next(c for _, c in judged.comparisons if c.metric == EVENT_STALL)
        fewest = min(fewest, *(len(e) for e in judged.events))
        winner = judged.verdict.arm if judged.verdict.winner is not None else None
        decided = ",".join(judged.verdict.decided_by)
        out[factor] = (winner, decided, effect_status(stall, MIN_EFFECT))
    return fewest, out


def share(hits: int, n: int) -> str:
    """``hits/n`` as a percentage with its 95 % Clopper–Pearson interval."""
    if n == 0:
        return "0/0"
    low = float(sps.beta.ppf(0.025, hits, n - hits + 1)) if hits else 0.0
    high = float(sps.beta.ppf(0.975, hits + 1, n - hits)) if hits < n else 1.0
    return f"{hits}/{n} {100 * hits / n:.1f} % [{100 * low:.1f}, {100 * high:.1f}]"


def report(title: str, done: list, planted: tuple[float, ...], started: float) -> None:
    """The shares of one cell: A/A winners, the stall alone, planted stalls found."""
    rows = [r for _, r in done]
    n = len(rows)
    aa = [r[1.0] for r in rows]
    named = sum(w is not None for w, _, _ in aa)
    by = Counter(d for w, d, _ in aa if w is not None)
    stall = sum(s == SIGNIFICANT for _, _, s in aa)
    print(f"{title} (fewest events measured in an arm: {min(e for e, _ in done)}):")
    print(f"  A/A winner (whole decision): {share(named, n)} by {dict(by)}")
    print(f"  A/A per-event stall alone significant: {share(stall, n)}")
    judged = [r for e, r in done if e >= MIN_UNITS]  # the stall judged per event
    for f in planted:
        found = sum(r[f][0] is not None and r[f][0].endswith("/A") for r in rows)
        on_events = sum(r[f][0] is not None and r[f][0].endswith("/A") for r in judged)
        print(
            f"  stall x{f:g} planted on B, A wins: {share(found, n)}; of the experiments "
            f"with {MIN_UNITS}+ events per arm: {share(on_events, len(judged))}"
        )
    print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="12", help="long prompts per arm")
    parser.add_argument("--trials", type=int, default=3, help="trials per arm")
    parser.add_argument("--chunks", default="256,8192", help="chunk sizes (one A/A each)")
    parser.add_argument("--planted", default="1.5,2,3", help="factors planted on the stall")
    parser.add_argument("--experiments", type=int, default=100)
    parser.add_argument("--gpu", default="a100-80gb")
    parser.add_argument("--drawn", action="store_true", help="each experiment a drawn shape")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    planted = tuple(float(f) for f in args.planted.split(",") if f)
    factors = (1.0, *planted)
    print(f"{args.trials} trials per arm, ABAB, each trial its own seed")
    for events in (int(e) for e in args.events.split(",")):
        per_trial = max(1, round(events / args.trials))
        first = args.seed + 100_000 * events
        cells = f"{per_trial * args.trials} events per arm ({per_trial} per trial)"
        if args.drawn:
            rng = random.Random(first)
            shapes = [drawn(rng) for _ in range(args.experiments)]
            started = time.perf_counter()
            done = []
            for k, shape in enumerate(shapes):
                done.append(experiment(shape, args.trials, per_trial, first + 1_000 * k, factors))
                print(f"  {shape.describe()}: A/A {done[-1][1][1.0][0] or 'no winner'}")
            report(f"{cells}, drawn shapes", done, planted, started)
            continue
        for chunk in (int(c) for c in args.chunks.split(",")):
            shape = Shape(TRAFFIC, args.gpu, "llama-3.1-8b", chunk)
            started = time.perf_counter()
            done = [
                experiment(shape, args.trials, per_trial, first + 1_000 * k, factors)
                for k in range(args.experiments)
            ]
            report(f"{cells}, {shape.describe()}", done, planted, started)


if __name__ == "__main__":
    main()
