"""The A/B's trade-offs, per-kind TTFT and stated rule, on fabricated trials with known answers.

Each arm's trials are run directories written through the real ``RunDir`` (``write_run``):
decode streams (kind ``decode``, 64-token prompts) and long prompts (kind ``long-prompt``).
The small-budget arm ticks slower between tokens (ITL p50/p95 up) but never stalls; the
large-budget arm ticks fast with a stall of 300 ms in 3 % of its gaps (ITL p99 and max up)
and serves the long prompts sooner. So the small budget wins on p99 ITL and must say that
it made ITL p50 and p95 worse; with an ITL SLO both meet, the large budget wins on the
long prompts' TTFT and must say that its worst stall is many times longer.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from run_shapes import streamed
from rundirs import write_run

from diagnose.ab import AbSettings, Trial, analyse_ab, make_arms
from diagnose.ab_metrics import kind_metric
from prefillscope.ab_view import render
from runfmt.slo import Slo
from session.ab_runner import AbOutcome

TRIALS = 3
DECODES, LONGS, TOKENS = 8, 10, 200


@dataclass(frozen=True)
class ArmShape:
    """How one arm's server behaves."""

    itl_s: float
    stall_share: float
    stall_s: float
    ttft_long_s: float
    ttft_decode_s: float


SMALL = ArmShape(itl_s=0.012, stall_share=0.0, stall_s=0.0, ttft_long_s=0.9, ttft_decode_s=0.02)
LARGE = ArmShape(itl_s=0.008, stall_share=0.03, stall_s=0.3, ttft_long_s=0.3, ttft_decode_s=0.03)


def trial_run(path: Path, shape: ArmShape, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    records, chunks = [], []
    for i in range(DECODES + LONGS):
        long = i >= DECODES
        kind, prompt = ("long-prompt", 8192) if long else ("decode", 64)
        tokens = 16 if long else TOKENS
        start = 0.1 * i
        first = start + (shape.ttft_long_s if long else shape.ttft_decode_s) * rng.lognormal(0, 0.1)
        gaps = shape.itl_s * rng.lognormal(0, 0.15, tokens - 1)
        gaps[rng.random(tokens - 1) < shape.stall_share] = shape.stall_s
        times = first + np.concatenate([[0.0], np.cumsum(gaps)])
        record, events = streamed(
            f"{kind}-{i}",
            start,
            times,
            kind=kind,
            prompt_tokens=prompt,
            output_tokens=tokens,
            max_tokens=tokens,
        )
        records.append(record)
        chunks += events
    summary = {"requests": {"total": DECODES + LONGS, "failed": 0}}
    return write_run(path, records, chunks, summary=summary)


def analysis(tmp_path: Path, slo: Slo | None = None):
    arms = make_arms([256, 8192], ["t", "t"])
    trials = [
        Trial(arm.index, r, trial_run(tmp_path / f"{arm.label}-{r}", shape, 10 * r + arm.index),
              "complete")
        for r in range(1, TRIALS + 1)
        for arm, shape in zip(arms, (SMALL, LARGE), strict=True)
    ]  # fmt: skip
    settings = AbSettings(trials=TRIALS, reference=1, slo=slo, resamples=500)
    return analyse_ab(arms, trials, settings)


@pytest.fixture(scope="module")
def no_slo(tmp_path_factory):
    return analysis(tmp_path_factory.mktemp("tradeoffs"))


def test_the_winner_on_the_stall_states_that_it_made_p50_and_p95_worse(no_slo):
    verdict = no_slo.result().verdict
    # 30 long prompts per arm: the stall is judged per prefill event, and 256 wins on it
    assert (verdict.winner, verdict.decided_by) == (256, ("event_stall",))
    assert verdict.unit == "events" and "30 or more per arm" in verdict.unit_reason
    worse = {t.metric: t for t in verdict.tradeoffs}
    assert {"itl_p50", "itl_p95"} <= set(worse)
    assert "itl_p99" not in worse and "itl_max" not in worse
    for metric in ("itl_p50", "itl_p95"):
        t = worse[metric]
        assert t.significant and t.against == "8192" and t.change > 0.2
        assert t.interval[0] > 0  # the change's interval excludes no change
        assert t.interval[0] <= t.change <= t.interval[1]
    # the long prompts wait three times longer with 256: a significant TTFT cost, per kind
    assert worse[kind_metric("ttft_p50", "long-prompt")].kind == "long-prompt"
    assert worse[kind_metric("ttft_p50", "long-prompt")].change > 1.0
    # … and per event: each long prompt's TTFT is a cost of its own, listed too
    assert worse["event_ttft"].change > 1.0 and worse["event_ttft"].significant
    sentence = verdict.tradeoff_sentence
    assert sentence is not None and "TTFT per long prompt +" in sentence
    assert not any(t.under_min_effect for t in verdict.tradeoffs)  # all well over 10 %
    assert sentence.startswith("trade-off: 256 made ITL p50 +")
    assert f"ITL p95 {worse['itl_p95'].text.removeprefix('ITL p95 ')}" in sentence
    assert "worse than 8192" in sentence
    assert verdict.sentence.endswith(sentence[1:])  # the verdict's sentence says it too
    assert verdict.rule.startswith(
        "no SLO given: the arm significantly best on worst decode gap per prefill wins"
    )
    # two chances to name a winner (the stall, the long prompts' TTFT): each at 97.5 %
    assert (
        "each of the 2 comparisons a winner may be named on (worst decode gap per prefill, "
        "p50 TTFT (long-prompt)) read at 97.5 % (Bonferroni)"
    ) in verdict.rule
    by_metric = {c.metric: c for c in no_slo.result().comparisons}
    for metric in ("event_stall", "ttft_p50[long-prompt]"):
        assert "; 97.5 % interval (Bonferroni" in by_metric[metric].method
    for metric in ("event_lost", "event_ttft", "itl_p50", "ttft_p50[decode]"):
        assert "Bonferroni" not in by_metric[metric].method  # reported, not decided on
    # the events nested in their trials: three trials per arm are the units
    stall = by_metric["event_stall"]
    assert stall.units == (TRIALS, TRIALS) and stall.method.startswith("trials as units (each")


def test_ttft_is_reported_and_weighed_per_request_kind(no_slo):
    doc = no_slo.result()
    assert doc.kinds == ("long-prompt", "decode")  # longest prompts first
    small, large = doc.arms
    for arm in (small, large):
        assert arm.by_kind["long-prompt"].requests == TRIALS * LONGS
        assert arm.by_kind["decode"].requests == TRIALS * DECODES
        assert arm.by_kind["long-prompt"].prompt_tokens_p50 == 8192
    assert small.by_kind["long-prompt"].figures["ttft_p50_s"] == pytest.approx(0.9, rel=0.15)
    assert large.by_kind["long-prompt"].figures["ttft_p50_s"] == pytest.approx(0.3, rel=0.15)
    kinds = {(c.metric, c.kind) for c in doc.comparisons}
    assert ("ttft_p50[decode]", "decode") in kinds and ("ttft_p50", None) in kinds
    assert doc.verdict is not None
    head = doc.verdict.sentence.split(";")[0]
    assert "p50 TTFT (long-prompt) +" in head and "p99 ITL \u2212" in head


def test_each_arm_has_its_itl_quantiles_with_intervals_and_its_worst_gap(no_slo):
    small, large = no_slo.result().arms
    for arm in (small, large):
        for key in ("itl_p50_s", "itl_p95_s", "itl_p99_s"):
            low, high = arm.intervals[key]
            assert low <= arm.figures[key] <= high
        assert len(arm.intervals["itl_max_per_trial_s"]) == TRIALS
        assert arm.figures["itl_max_s"] == max(arm.intervals["itl_max_per_trial_s"])
    assert large.figures["itl_max_s"] == pytest.approx(0.3)
    assert small.figures["itl_max_s"] < 0.05


def test_with_an_slo_the_rule_is_slo_first_and_the_stall_is_stated(tmp_path):
    verdict = analysis(tmp_path, Slo(itl_s=0.5)).result().verdict
    assert verdict.rule.startswith("SLO first: only arms meeting ITL p99 \u2264 500 ms")
    assert (verdict.winner, verdict.decided_by) == (8192, ("ttft_p50[long-prompt]",))
    worse = {t.metric: t for t in verdict.tradeoffs}
    assert {"itl_p99", "itl_max"} <= set(worse)
    assert worse["itl_max"].ratio > 5 and worse["itl_max"].against == "256"
    assert "8192's worst stall (ITL max) is " in (verdict.tradeoff_sentence or "")
    assert "; with ITL p99 \u2264 500 ms, choose 8192. Trade-off: 8192 made " in verdict.sentence


def test_the_view_prints_the_rule_the_kinds_and_the_trade_offs(no_slo, tmp_path):
    buffer = io.StringIO()
    result = replace(no_slo.result(), out=str(tmp_path))
    outcome = AbOutcome(tmp_path, "complete", no_slo, result)
    render(outcome, Console(file=buffer, width=200))
    text = buffer.getvalue()
    for title in ("ITL per arm", "TTFT by request kind", "what 256 made significantly worse"):
        assert title in text
    assert "ttft_p50[long-prompt]" in text  # a kind's metric is not eaten as markup
    assert "rule: no SLO given" in text and "Trade-off: 256 made ITL p50 +" in text


def test_the_view_and_the_verdict_name_and_write_metrics_as_the_registry_does(
    no_slo, tmp_path, monkeypatch
):
    """Renamed and re-united in the registry, ITL is headed, worded and written so by the
    A/B's view, its verdict and its trade-offs: none of them keeps its own label."""
    import dataclasses

    from runfmt import metrics

    itl = metrics.by_key("itl_s")
    renamed = dataclasses.replace(itl, short="GAP", unit="ms?")
    swapped = [renamed if m.key == itl.key else m for m in metrics.latencies()]
    monkeypatch.setattr(metrics, "_LATENCIES", swapped)
    doc = replace(analysis(tmp_path / "ab").result(), out=str(tmp_path))
    buffer = io.StringIO()
    render(AbOutcome(tmp_path, "complete", no_slo, doc), Console(file=buffer, width=240))
    text = buffer.getvalue()
    for heading in ("GAP p50", "GAP p95", "GAP p99", "GAP max", "GAP per arm"):
        assert heading in text
    assert "ITL p" not in text and " ITL " not in text and "ITL mean" not in text
    assert f"{doc.arms[0].figures['itl_p99_s']:.3g} ms?" in text  # in the registry's unit
    verdict = doc.verdict
    assert verdict is not None and verdict.tradeoff_sentence is not None
    assert "(gaps pooled: p99 GAP " in verdict.sentence  # beside the per-event stall
    assert verdict.tradeoff_sentence.startswith("trade-off: 256 made GAP p50 +")


def test_a_significant_cost_under_the_min_effect_is_listed_and_marked():
    """+5.3 % [+2.2, +8.4] on p50 TTFT: significant, smaller than --min-effect 10 %. The
    winner's trade-offs list it, marked, instead of leaving it out."""
    from test_ab_verdict import MATCHED, decision

    from diagnose.ab_tradeoffs import with_tradeoffs
    from diagnose.ab_verdict import decide

    d = decision({512: (30, 200), 4096: (180, 190)}, width=1.03)
    verdict = with_tradeoffs(decide(d, MATCHED), d, ["itl_p99", "ttft_p50"])
    assert verdict.winner == 512
    (cost,) = verdict.tradeoffs
    assert cost.metric == "ttft_p50" and cost.under_min_effect
    assert cost.text == "TTFT p50 +5.3 % [+2.2, +8.4] (under --min-effect 10 %)"
    assert verdict.sentence.endswith(
        "Trade-off: 512 made TTFT p50 +5.3 % [+2.2, +8.4] (under --min-effect 10 %) worse than 4096"
    )
