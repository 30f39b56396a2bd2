"""How often the A/B's per-event stall comparison is wrong: A/A false positives, detection.

Data: virtual-time runs of the embedded engine (``simengine.driver.VirtualDriver``: the
engine's scheduler and cost model on a simulated clock) serving the ``interference`` plan
``diagnose ab`` sends — closed-loop decode streams and long prompts dropped into them —
one seed per arm, so the long prompts land at other moments of the decode streams (an
A/B's arms share one plan, which only narrows the spread: this is the harder case). Each
long prompt is one event (``diagnose.ab_events``: its worst decode gap, the decode time
it cost, its TTFT), measured from the token times as ``diagnose ab`` measures them from a
trial's chunks.

An A/A pair is two seeds of one chunk size. A planted effect multiplies the NEW arm's
per-event stall by f (1.5×, 2×, 3×) and leaves the rest alone. Each pair goes through the
comparison ``diagnose ab`` runs (``ab_events.compare_events``) and its verdict reading
(``ab_verdict.effect_status`` at ``--min-effect`` 10 %). Printed per events-per-arm and
chunk size: how often an A/A pair is called significant (false positives), and how often
each planted effect is (detection), with in brackets the share ``inconclusive``. Goals:
false positives ≤ 5 %, detection ≥ 90 % for 2× at 12 events per arm.

Run: ``.venv/bin/python benchmarks/ab_event_calibration.py [--events 6,12,24]
[--pairs 100] [--chunks 256,8192]``. About a minute per 100 pairs on one core.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import numpy as np

from diagnose.ab_effect import effect_status
from diagnose.ab_events import EVENT_STALL, compare_events, scaled
from perfmodel.config import EngineConfig
from probes.stall_events import StallEvents
from session.sim_workload import from_plan
from simengine.core import EngineCore
from simengine.driver import VirtualDriver
from workloads.build import build_plan
from workloads.spec import load_spec

PLANTED = (1.5, 2.0, 3.0)
MIN_EFFECT = 0.10
#: The Must-show A/B's traffic: six decode streams of 400 tokens, 12k-token prompts.
TRAFFIC = {"concurrency": 6, "stream_output_len": 400, "long_prompt_len": 12000, "rate": 0.5}


def simulate_events(chunk: int, events: int, seed: int, gpu: str) -> StallEvents:
    """The events of one virtual-time trial of ``events`` long prompts at budget ``chunk``."""
    # the decode streams outlast the injections: ~2 s of each stream's 400 tokens per prompt
    streams = math.ceil(events * 2.0 / 3.0) + 2
    spec = load_spec(
        "interference", TRAFFIC | {"num_requests": events, "seed": seed, "stream_requests": streams}
    )
    plan = build_plan(spec)
    config = dataclasses.replace(EngineConfig(gpu=gpu), max_num_batched_tokens=chunk)
    arrivals, release = from_plan(plan, config.vocab_size, config.model).start()
    result = VirtualDriver(EngineCore(config)).run(arrivals, record_steps=False, release=release)
    kinds = {r.id: r.kind for r in plan.requests}
    long = [
        t for rid, t in result.requests.items() if kinds[rid] == "long-prompt" and t.token_times
    ]
    gaps, ends = [], []
    for rid, timing in result.requests.items():
        if kinds[rid] != "long-prompt" and len(timing.token_times) > 1:
            times = np.asarray(timing.token_times)
            gaps.append(np.diff(times))
            ends.append(times[1:])
    return StallEvents.measure(
        [t.arrival_s for t in long],
        [t.token_times[0] for t in long],
        [t.token_times[0] - t.arrival_s for t in long],
        np.concatenate(gaps),
        np.concatenate(ends),
    )


def outcome(base: StallEvents, new: StallEvents, seed: int) -> str:
    """significant, equivalent or inconclusive: the stall comparison as the verdict reads it."""
    c = compare_events(base, new, resamples=2000, confidence=0.95, seed=seed)[EVENT_STALL]
    return effect_status(c, MIN_EFFECT)


def rate_text(outcomes: list[str]) -> str:
    n = len(outcomes)
    significant = sum(o == "significant" for o in outcomes) / n
    undecided = sum(o == "inconclusive" for o in outcomes) / n
    return f"{significant:6.1%} ({undecided:5.1%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="6,12,24", help="long prompts per arm")
    parser.add_argument("--chunks", default="256,8192", help="chunk sizes (one A/A each)")
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--gpu", default="a100-80gb")
    args = parser.parse_args()
    print(f"interference {TRAFFIC} on {args.gpu}, {args.pairs} pairs per cell")
    print("share called significant, in brackets share inconclusive (min effect 10 %)")
    header = f"{'events':>6}  {'chunk':>5}  {'A/A (false pos.)':>17}"
    print(header + "".join(f"  {f'{f:g}x planted':>17}" for f in PLANTED))
    for events in (int(e) for e in args.events.split(",")):
        for chunk in (int(c) for c in args.chunks.split(",")):
            started = time.perf_counter()
            found: dict[float, list[str]] = {f: [] for f in (1.0, *PLANTED)}
            for pair in range(args.pairs):
                base, new = (
                    simulate_events(chunk, events, 10_000 * events + 2 * pair + k, args.gpu)
                    for k in (0, 1)
                )
                for factor, rows in found.items():
                    rows.append(outcome(base, scaled(new, EVENT_STALL, factor), seed=pair))
            cells = [rate_text(found[f]) for f in (1.0, *PLANTED)]
            line = f"{events:>6}  {chunk:>5}  {cells[0]:>17}"
            elapsed = time.perf_counter() - started
            print(line + "".join(f"  {cell:>17}" for cell in cells[1:]) + f"  ({elapsed:.0f} s)")


if __name__ == "__main__":
    main()
