"""Different draws of stall events: a worst-gap level the whole run shares (the phase of
its chunk grid) is carried into the interval (``diagnose.draws.grid_variance``), and a
change within it is said to be inconclusive, while real changes stay decided."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from diagnose.compare import RunSamples, compare_samples
from diagnose.draws import grid_note, grid_variance
from diagnose.gate import FAIL, NOT_SIGNIFICANT, PASS, SIGNIFICANT, parse_gate
from probes.stall_events import RunStalls, StallEvents
from probes.token_gaps import TokenGaps

RESAMPLES = 400
NORMAL_S = 0.0114
DRAWS = "the seeds differ"


def grid_run(
    rng: np.random.Generator,
    worst_s: float,
    *,
    events: int = 12,
    chunks: int = 19,
    growth_s: float = 0.00214,
    streams: int = 10,
    noise: float = 0.0,
    jitter: float = 0.0005,
) -> RunSamples:
    """A run of ``events`` long prefills, each ``chunks`` steps whose duration grows by
    ``growth_s`` a chunk (attention over a growing context) up to about ``worst_s`` (the
    level the run's phase set, every event alike but for ``jitter``), ``noise`` a
    log-normal s.d. per step; each of ``streams`` decode streams sees every step, normal
    steps between the prefills."""
    steps, worst = [], []
    for _ in range(events):
        top = worst_s * (1.0 + rng.uniform(-jitter, jitter))
        chunk = (top - growth_s * np.arange(chunks)[::-1]) * np.exp(rng.normal(0.0, noise, chunks))
        worst.append(chunk.max())
        steps += [*chunk, *np.full(30, NORMAL_S)]
    steps = np.asarray(steps)
    gap_s = np.tile(steps, streams)
    request = np.repeat(np.arange(streams), len(steps))
    ends = np.tile(np.cumsum(steps), streams)
    gaps = TokenGaps(gap_s, request, ends, np.arange(streams).astype(object))
    stalled = events * chunks * streams
    found = StallEvents(np.asarray(worst), np.full(events, 0.05), np.ones(events), 0, stalled,
                        NORMAL_S)  # fmt: skip
    return RunSamples(
        path=Path("run"), run=None, latencies=pd.DataFrame({"ttft_s": [1.0]}), gaps=gaps,
        throughput=pd.DataFrame(), requests=events + streams,
        stalls=RunStalls("long-prompt", found, len(gap_s)),
    )  # fmt: skip


def compared(base: RunSamples, new: RunSamples, draws: str | None = DRAWS, seed: int = 0):
    result = compare_samples(
        base, new, [parse_gate("stall_worst:+25%")], metrics=["stall_worst"],
        resamples=RESAMPLES, seed=seed, draws=draws,
    )  # fmt: skip
    (row,) = result.rows
    return row


def test_grid_variance_is_one_chunks_growth_of_the_stall_step_uniform_over_a_step():
    rng = np.random.default_rng(0)
    run = grid_run(rng, 0.128)
    # each stream's consecutive stall steps grow by 2.14 ms; the level is ~128 ms
    expected = (0.00214 / np.mean(run.stalls.events.stall_s)) ** 2 / 12.0
    assert run.grid_variance() == pytest.approx(expected, rel=1e-6)
    # a pair of gaps that belongs to two requests, or a normal gap, is no step of the grid
    gap_s = np.array([0.10, 0.20, 0.30, 0.01, 0.40])
    assert grid_variance(gap_s, np.array([0, 0, 1, 1, 1]), 0.05, 0.2) == pytest.approx(0.0, abs=0.0)
    two = grid_variance(gap_s, np.array([0, 0, 0, 1, 1]), 0.05, 0.2)
    assert two == pytest.approx((0.1 / 0.2) ** 2 / 12.0)
    # no level, or one step: nothing known
    assert grid_variance(gap_s, np.zeros(5, int), 0.05, math.nan) == 0.0
    assert grid_variance(gap_s[:2], np.zeros(2, int), 0.05, 0.2) == 0.0


def test_the_grid_note_covers_the_levels_band_and_nothing_beyond_it():
    levels = [(0.017**2) / 12.0] * 2  # one chunk grows the step 1.7 % in each run
    # the band: 1.96 × √(2 × 0.017² / 12) = 1.36 %
    assert grid_note(levels, 1.013, 0.95).startswith("the change is inconclusive within ±1.4%")
    assert grid_note(levels, 1 / 1.013, 0.95) is not None
    assert grid_note(levels, 1.015, 0.95) is None and grid_note(levels, 0.985, 0.95) is None
    assert grid_note([0.0, 0.0], 1.001, 0.95) is None
    assert grid_note(levels, math.nan, 0.95) is None


def test_two_draws_whose_whole_runs_sit_at_levels_under_a_chunk_apart_are_not_called_different():
    # the calibration's 26 pairs: one run's worst gaps all at 128.0 ms, the other's at
    # 127.2 ms (0.6 % apart, under one chunk's 1.7 % growth); within each run the events
    # agree to 0.05 %, so a bootstrap of events calls them different
    rng = np.random.default_rng(1)
    base, new = grid_run(rng, 0.1280), grid_run(rng, 0.1272)
    same = compared(base, new, draws=None)
    assert same.status == SIGNIFICANT and same.note is None  # one draw: as before
    row = compared(base, new)
    c = row.comparison
    assert row.status == NOT_SIGNIFICANT and c.ci_low < 1.0 < c.ci_high
    assert c.significant == (c.p_value < 0.05)  # one rule for the interval and p
    assert "phase of its chunk grid" in c.method and "the seeds differ" in c.method
    assert row.note.startswith("the change is inconclusive within ±1.")
    assert "trials (diagnose ab)" in row.note
    assert row.gate_verdict == PASS  # the +25 % gate is decided: far within it


@pytest.mark.parametrize("factor", [1.5, 2.0])
def test_a_real_change_of_the_worst_gap_is_still_decided_and_fails_the_gate(factor):
    rng = np.random.default_rng(2)
    base, new = grid_run(rng, 0.128), grid_run(rng, 0.128 * factor, growth_s=0.00214 * factor)
    row = compared(base, new)
    assert row.status == SIGNIFICANT and row.note is None
    assert row.comparison.ci_low > 1.25 and row.gate_verdict == FAIL


def test_noisy_runs_keep_every_one_and_a_half_fold_stall_the_batches_alone_detect(monkeypatch):
    # a real-looking case: every step ±10 % (log-normal), events differing by their own
    # noise, so the consecutive-step growth is mostly noise too. The grid's level must
    # hide no change the time batches alone would decide (with 12 events, two batches of
    # one degree of freedom each miss a pair or two of 20 either way)
    rng = np.random.default_rng(3)
    pairs = [tuple(grid_run(rng, 0.128 * f, noise=0.1) for f in (1.0, 1.0, 1.5)) for _ in range(20)]

    def verdicts() -> tuple[list[bool], list[str]]:
        rows = [(compared(b, w, seed=i), compared(b, a, seed=i)) for i, (b, a, w) in
                enumerate(pairs)]  # fmt: skip
        return [w.status == SIGNIFICANT for w, _ in rows], [a.gate_verdict for _, a in rows]

    called, gates = verdicts()
    monkeypatch.setattr(RunSamples, "grid_variance", lambda self: 0.0)
    alone, _ = verdicts()
    assert all(c for c, a in zip(called, alone, strict=True) if a)
    assert sum(called) >= 18 and FAIL not in gates
