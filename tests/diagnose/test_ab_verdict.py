"""The A/B's rules on known inputs: the decision, the conditions, the output comparison."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rundirs import write_run

from diagnose.ab import alternating, make_arms
from diagnose.ab_conditions import (
    DEFAULT_TOLERANCES,
    TrialFacts,
    check_conditions,
    parse_tolerances,
)
from diagnose.ab_verdict import Decision, decide, percent
from diagnose.outputs_check import Output, OutputComparison, first_divergence
from diagnose.stats import Comparison
from loadgen.records import RequestRecord
from prefillscope.commands.diagnose_ab import parse_chunks
from runfmt.codec import encode
from runfmt.slo import Slo
from session.launcher import LaunchTemplate
from workloads.errors import InputError

MATCHED = check_conditions([], [], 0, DEFAULT_TOLERANCES)


def decision(
    stats: dict[int, tuple[float, float]], slo: Slo | None = None, width: float = 1.1
) -> Decision:
    """Arms by chunk with (p99 ITL, p50 TTFT) in ms, each ratio's interval ``[r / width,
    r * width]`` from 12 units per arm (the default: a difference over 10 % is
    significant, and none is shown to be under 10 %)."""
    arms = make_arms(list(stats), ["t"] * len(stats))
    values = [
        {"itl_p99_s": itl / 1e3, "ttft_p50_s": ttft / 1e3, "ttft_p99_s": 2 * ttft / 1e3}
        for itl, ttft in stats.values()
    ]

    def compare(base: int, new: int) -> dict[str, Comparison]:
        out = {}
        for metric in ("itl_p99", "ttft_p50"):
            ratio = values[new][f"{metric}_s"] / values[base][f"{metric}_s"]
            interval = (ratio / width, ratio * width)
            p = 0.001 if not interval[0] <= 1 <= interval[1] else 0.5
            pair = (values[base][f"{metric}_s"], values[new][f"{metric}_s"])
            out[metric] = Comparison.judge(
                metric, ratio, interval, p, pair, "trials", 0.95, units=(12, 12)
            )
        return out

    return Decision(arms, values, compare, len(arms) - 1, slo)


@pytest.mark.parametrize(
    ("ratio", "text"),
    [
        (0.62, "\u221238 %"),
        (1.12, "+12 %"),
        (0.955, "\u22124.5 %"),
        (1.0, "0.0 %"),
        (2.5, "+150 %"),
    ],
)
def test_changes_read_as_signed_percentages(ratio, text):
    assert percent(ratio) == text


def test_without_an_slo_the_lower_p99_itl_wins_and_the_ttft_cost_is_stated():
    verdict = decide(decision({512: (30, 200), 4096: (180, 150)}), MATCHED)
    assert (verdict.winner, verdict.decided_by) == (512, ("itl_p99",))
    assert verdict.sentence.startswith("512 vs 4096: p99 ITL \u221283 % [")
    assert "p50 TTFT +33 % [+21, +47]" in verdict.sentence
    assert verdict.sentence.endswith("no SLO given, p99 ITL first: choose 512")


def test_with_an_itl_slo_both_meet_the_better_ttft_wins():
    verdict = decide(decision({512: (30, 200), 4096: (180, 150)}, Slo(itl_s=0.2)), MATCHED)
    assert verdict.winner == 4096 and verdict.decided_by == ("ttft_p50",)
    assert verdict.sentence.endswith("with ITL p99 \u2264 200 ms, choose 4096")


def test_with_an_itl_slo_only_one_meets_it_wins_when_significantly_better():
    verdict = decide(decision({512: (30, 200), 4096: (180, 150)}, Slo(itl_s=0.05)), MATCHED)
    assert (verdict.winner, verdict.decided_by) == (512, ("slo",))
    assert verdict.sentence.endswith("with ITL p99 \u2264 50 ms, choose 512")
    close = decide(decision({512: (30, 200), 1024: (33, 150)}, Slo(itl_s=0.032)), MATCHED)
    assert close.winner is None and "not significantly better than 1024" in close.sentence


def test_when_no_chunk_size_meets_the_slo_there_is_no_winner():
    verdict = decide(decision({512: (30, 200), 4096: (180, 150)}, Slo(itl_s=0.01)), MATCHED)
    assert verdict.winner is None and not verdict.refused
    assert verdict.sentence.endswith(
        "no chunk size meets ITL p99 \u2264 10 ms (lowest p99 ITL 30 ms, 512)"
    )


def test_the_trade_off_curve_picks_the_largest_chunk_meeting_the_itl_slo():
    curve = {512: (30, 400), 1024: (50, 300), 2048: (90, 200), 4096: (180, 150)}
    verdict = decide(decision(curve, Slo(itl_s=0.1)), MATCHED)
    assert verdict.winner == 2048
    assert verdict.sentence.startswith(
        "chunks 512, 1024, 2048, 4096: p99 ITL 30 ms \u2192 180 ms; "
        "p50 TTFT 400 ms \u2192 150 ms (smallest \u2192 largest chunk)"
    )
    assert verdict.sentence.endswith("with ITL p99 \u2264 100 ms, choose 2048")
    no_slo = decide(decision(curve), MATCHED)
    assert no_slo.winner == 512 and "(p50 TTFT +167 % [" in no_slo.sentence
    assert no_slo.sentence.endswith("vs 4096)")


def test_itl_ties_are_broken_by_ttft_and_full_ties_have_no_winner():
    tie = decide(decision({1024: (50, 300), 2048: (52, 200)}), MATCHED)
    assert (tie.winner, tie.decided_by) == (2048, ("ttft_p50",))
    assert tie.sentence.endswith("p99 ITL does not differ significantly: choose 2048 for p50 TTFT")
    same = decide(decision({2048: (90, 200), 4096: (92, 205)}, width=1.05), MATCHED)
    assert same.winner is None and same.outcome == "equivalent"
    assert same.sentence.endswith("no significant difference: every interval lies within ±10 %")


def test_a_tie_the_intervals_cannot_bound_is_inconclusive_with_the_data_that_would_decide():
    # −2.2 % [−11, +7.6]: not significant, yet a 10 % change is not ruled out
    wide = decide(decision({2048: (90, 200), 4096: (92, 205)}), MATCHED)
    assert wide.winner is None and wide.outcome == "inconclusive"
    assert "no significant difference" not in wide.sentence
    assert "p99 ITL \u22122.2 % [\u221211, +7.6] inconclusive" in wide.sentence
    # within ±10 % by its ratio: the trials at which [r/1.1, r·1.1] would fit inside ±10 %
    # (Comparison.units_to_separate against 0.9: (log 1.1 / log(0.978 / 0.9))² × 12 = 15.8, so 16)
    assert encode(wide.needed) == {"metric": "itl_p99", "arms": ["4096", "2048"], "units": 16,
                           "unit": "trials", "have": [12, 12],
                           "reason": "cannot rule out a change of ±10 % or more"}  # fmt: skip
    assert wide.sentence.endswith(
        "inconclusive: p99 ITL (2048 vs 4096) \u22122.2 % [\u221211, +7.6] cannot rule out a "
        "change of ±10 % or more; about 16 trials per arm would decide"
    )
    # a large change a wide interval cannot tell from none: the size that would exclude it
    far = decide(decision({2048: (60, 200), 4096: (92, 205)}, width=1.8), MATCHED)
    assert far.outcome == "inconclusive" and far.needed.units > 12
    assert "p99 ITL \u221235 % [\u221264, +17] inconclusive" in far.sentence
    # a wider band (--min-effect 25) accepts the first tie as no difference
    loose = decide(replace(decision({2048: (90, 200), 4096: (92, 205)}), min_effect=0.25), MATCHED)
    assert loose.outcome == "equivalent" and loose.min_effect == 0.25


def test_a_significant_change_inside_the_band_is_no_difference_that_matters():
    # −0.5 % [−0.7, −0.3] excludes no change, and any change is under 10 %: no winner on it
    tiny = decide(decision({2048: (91.5, 200), 4096: (92, 200)}, width=1.002), MATCHED)
    assert tiny.winner is None and tiny.outcome == "equivalent"


def test_unmatched_conditions_refuse_whatever_the_numbers():
    facts = [fact(0), fact(1, output_tokens=500)]
    conditions = check_conditions(facts, ["512", "4096"], 1, DEFAULT_TOLERANCES)
    verdict = decide(decision({512: (30, 200), 4096: (180, 150)}), conditions)
    assert verdict.refused and verdict.winner is None
    assert verdict.sentence.startswith("no verdict: the arms' conditions did not match (")
    assert "output_tokens: largest deviation" in verdict.sentence


def fact(arm: int, **changes) -> TrialFacts:
    values = {
        "arm": arm,
        "status": "complete",
        "requests": 100,
        "failed": 0,
        "prompt_tokens": 10_000.0,
        "output_tokens": 1_000.0,
        "open_loop_rate": 5.0,
        "observed_hit_rate": 0.5,
        "cpu_saturated": False,
        "loop_lag_p99_s": 0.001,
        "dispatch_lag_p99_s": 0.001,
        # an embedded engine on time: step lateness p99 1 ms against an ITL p99 of 50 ms
        "lateness_p99_s": 0.001,
        "lateness_mean_s": 0.0002,
        "itl_p99_s": 0.05,
    }
    return TrialFacts(**(values | changes))


def checks(facts: list[TrialFacts], **tolerances: float) -> dict[str, bool | None]:
    labels = ["A", "B"]
    trials = max(sum(f.arm == i for f in facts) for i in range(2))
    conditions = check_conditions(facts, labels, trials, replace(DEFAULT_TOLERANCES, **tolerances))
    return {c.name: c.matched for c in conditions.checks}


def test_matched_trials_pass_every_check():
    facts = [fact(i % 2) for i in range(6)]
    assert all(checks(facts).values())


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"failed": 2}, "errors"),
        ({"status": "interrupted"}, "trials"),
        ({"prompt_tokens": 10_500.0}, "prompt_tokens"),
        ({"output_tokens": 900.0}, "output_tokens"),
        ({"open_loop_rate": 4.0}, "request_rate"),
        ({"observed_hit_rate": 0.4}, "hit_rate"),
        ({"observed_hit_rate": None}, "hit_rate"),
        ({"lateness_p99_s": 0.02}, "engine_pace"),  # 40 % of its ITL p99
        ({"lateness_p99_s": None}, "engine_pace"),  # published in some trials only
    ],
)
def test_one_trial_off_fails_its_check(changes, name):
    facts = [fact(i % 2) for i in range(5)] + [fact(1, **changes)]
    result = checks(facts)
    assert result[name] is False
    assert all(v for k, v in result.items() if k != name)


def test_the_client_must_hold_up_alike_in_every_arm():
    saturated = [fact(0) for _ in range(3)] + [fact(1, cpu_saturated=True) for _ in range(3)]
    assert checks(saturated)["client"] is False
    assert checks(saturated, client=1.0)["client"] is True
    late = [fact(0) for _ in range(3)] + [fact(1, loop_lag_p99_s=0.008) for _ in range(3)]
    assert checks(late)["client"] is False  # medians 1 ms vs 8 ms: more than 5 ms apart
    assert checks(late, loop_lag=0.01)["client"] is True
    alike = [fact(i % 2, cpu_saturated=i < 2, dispatch_lag_p99_s=0.05) for i in range(6)]
    assert checks(alike)["client"] is True  # dispatch lag alone is not judged


@pytest.mark.parametrize(
    ("client", "saturated", "loop"),
    [
        ({"limited": True, "reasons": ["dispatch lag p99 27.2 ms > 5 ms"]}, False, None),
        ({"limited": False, "loop_lag_s": {"p99": 0.02}}, False, 0.02),
        ({"limited": True, "cpu_share": {"sustained_max": 0.95}}, True, None),
    ],
)
def test_a_trial_is_read_from_its_run_directory(tmp_path, client, saturated, loop):
    row = RequestRecord("r1", intended_s=0.0, sent_s=0.01, first_token_s=0.1, end_s=0.2)
    trial = write_run(
        tmp_path / "trial",
        [row.to_row() | {"prompt_tokens": 10, "output_tokens": 5}],
        summary={"requests": {"total": 1, "failed": 0}, "client": client},
    )
    facts = TrialFacts.read(0, trial, frozenset({"r1"}))
    assert (facts.cpu_saturated, facts.loop_lag_p99_s) == (saturated, loop)
    assert (facts.status, facts.prompt_tokens, facts.output_tokens) == ("complete", 10.0, 5.0)
    assert facts.open_loop_rate is None  # one scheduled request has no rate


def test_a_trial_that_never_ran_is_a_failed_one(tmp_path):
    facts = TrialFacts.read(1, tmp_path / "missing", frozenset())
    assert (facts.arm, facts.status, facts.requests) == (1, "failed", 0)


def test_a_starved_engine_refuses_the_verdict_while_the_client_stays_calm():
    # the case seen: one arm's ITL p99 237 ms (69 ms in the next run), the client healthy
    starved = [fact(0, itl_p99_s=0.069) for _ in range(3)] + [
        fact(1, lateness_p99_s=0.17, lateness_mean_s=0.02, itl_p99_s=0.237) for _ in range(3)
    ]
    conditions = check_conditions(starved, ["512", "4096"], 3, DEFAULT_TOLERANCES)
    by_name = {c.name: c for c in conditions.checks}
    assert not conditions.matched and by_name["client"].matched is True
    pace = by_name["engine_pace"]
    assert pace.matched is False
    assert pace.detail == (
        "the engine ran late in 3 of 6 trials: step lateness p99 up to 170 ms (72% of that "
        "trial's ITL p99 237 ms, arm 4096), beyond 50%"
    )
    assert pace.values["4096"][0]["lateness_p99_s"] == 0.17
    verdict = decide(decision({512: (69, 200), 4096: (237, 150)}), conditions)
    assert verdict.refused and verdict.winner is None
    assert verdict.sentence == (
        "no verdict: the arms' conditions did not match (engine_pace: " + pace.detail + ")"
    )
    # a bound loose enough for one trial's 72 % (--tolerance engine_lateness=0.5: 100 % a
    # trial) still sees the arms unevenly late: 1 % against 72 %, more than 50 points apart
    loose = replace(DEFAULT_TOLERANCES, engine_lateness=0.5)
    reasons = check_conditions(starved, ["512", "4096"], 3, loose).reasons
    assert len(reasons) == 1 and "uneven between arms" in reasons[0]


def test_the_engine_late_in_one_arm_only_is_uneven_even_within_the_bound():
    # each trial within 20 % of its ITL p99, but one arm's 1 % against the other's 18 %
    uneven = [fact(0, lateness_p99_s=0.0005) for _ in range(3)] + [
        fact(1, lateness_p99_s=0.009) for _ in range(3)
    ]
    conditions = check_conditions(uneven, ["A", "B"], 3, DEFAULT_TOLERANCES)
    pace = next(c for c in conditions.checks if c.name == "engine_pace")
    assert pace.matched is False and not conditions.matched
    assert pace.detail == (
        "the engine's lateness was uneven between arms: B's trials ran a median 17 points of "
        "the ITL p99 later than A's beside them, round by round (B 18%, 18%, 18%; A 1%, 1%, 1%)"
    )
    # 17 points apart: within a 20 % bound (--tolerance engine_lateness=0.2)
    assert checks(uneven, engine_lateness=0.2)["engine_pace"] is True
    alike = [fact(i % 2, lateness_p99_s=0.009) for i in range(6)]  # 18 % in both arms
    assert checks(alike)["engine_pace"] is True
    # as the idle machine's A/B: the 512 arm 7 %, the 4096 arm 1 %
    idle = [fact(0, lateness_p99_s=0.0036) for _ in range(3)] + [
        fact(1, lateness_p99_s=0.0005) for _ in range(3)
    ]
    assert checks(idle)["engine_pace"] is True


def test_lateness_is_paired_round_by_round_not_arm_median_against_arm_median():
    # diagnosis_accuracy --seed 2's A/A (h200, budget 512, ITL p99 21-23 ms in every trial)
    # at load 2.5 on 2 cores: A 39, 33, 10 %, B 34, 10, 19 % of the ITL p99, rounds run ABAB.
    # The arms' medians are 14 points apart, but round by round B ran a median 5 points
    # *earlier*: the spells of load fell on moments, not on an arm.
    def trials(a: tuple[float, ...], b: tuple[float, ...]) -> list[TrialFacts]:
        return [
            fact(arm, round=r + 1, lateness_p99_s=share * 0.022, itl_p99_s=0.022)
            for r in range(len(a))
            for arm, share in ((0, a[r]), (1, b[r]))
        ]

    moments = trials((0.387, 0.333, 0.096), (0.335, 0.098, 0.191))
    assert checks(moments)["engine_pace"] is True
    # the trials given in another order are paired by their rounds all the same
    assert checks(list(reversed(moments)))["engine_pace"] is True
    # one arm later in every round, its shares overlapping the other arm's: uneven
    later = trials((0.05, 0.20, 0.30), (0.18, 0.33, 0.42))
    conditions = check_conditions(later, ["A", "B"], 3, DEFAULT_TOLERANCES)
    pace = next(c for c in conditions.checks if c.name == "engine_pace")
    assert pace.matched is False
    assert pace.detail.startswith(
        "the engine's lateness was uneven between arms: B's trials ran a median 13 points"
    )


def test_one_starved_trial_is_judged_against_the_others_not_against_a_fixed_share():
    # an idle machine's fast configuration: every trial 10-24 % of its ITL p99 25 ms alike
    shares = (0.10, 0.24, 0.16, 0.22, 0.13, 0.19)
    shared = [
        fact(i % 2, lateness_p99_s=share * 0.025, itl_p99_s=0.025) for i, share in enumerate(shares)
    ]
    assert checks(shared)["engine_pace"] is True
    # one of those trials starved: 40 % against the six trials' median 19 %, 21 points above
    starved = [*shared[:5], fact(1, lateness_p99_s=0.010, itl_p99_s=0.025)]
    conditions = check_conditions(starved, ["A", "B"], 3, DEFAULT_TOLERANCES)
    pace = next(c for c in conditions.checks if c.name == "engine_pace")
    assert pace.matched is False
    assert pace.detail == (
        "the engine ran late in 1 of 6 trials: step lateness p99 up to 10 ms (40% of that "
        "trial's ITL p99 25 ms, arm B), 21 points above the trials' median 19%"
    )
    # a lateness every trial shares beyond half the tail is refused all the same
    drowned = [fact(i % 2, lateness_p99_s=0.014, itl_p99_s=0.025) for i in range(6)]
    assert checks(drowned)["engine_pace"] is False


def test_a_server_that_publishes_no_lateness_is_unknown_not_failed():
    real = [fact(i % 2, lateness_p99_s=None, lateness_mean_s=None) for i in range(6)]
    conditions = check_conditions(real, ["A", "B"], 3, DEFAULT_TOLERANCES)
    pace = next(c for c in conditions.checks if c.name == "engine_pace")
    assert conditions.matched and pace.matched is None
    assert pace.detail.startswith("unknown: the server publishes no step lateness")
    # the checks before it keep their names, order and keys (ab.json stays compatible)
    assert [c.name for c in conditions.checks] == [
        "trials", "errors", "prompt_tokens", "output_tokens", "request_rate", "hit_rate",
        "client", "engine_pace",
    ]  # fmt: skip


def test_a_trial_reads_its_engine_pace_from_its_summary(tmp_path):
    row = RequestRecord("r1", intended_s=0.0, sent_s=0.01, first_token_s=0.1, end_s=0.2)
    lateness = {"count": 40, "mean": 0.01, "p50": 0.008, "p99": 0.03, "unit": "s"}
    trial = write_run(
        tmp_path / "trial",
        [row.to_row() | {"prompt_tokens": 10, "output_tokens": 5}],
        summary={
            "requests": {"total": 1, "failed": 0},
            "itl_s": {"count": 4, "p50": 0.02, "p99": 0.06},
            "server": {"available": True, "step_lateness_s": lateness},
        },
    )
    facts = TrialFacts.read(0, trial, frozenset({"r1"}))
    assert (facts.lateness_p99_s, facts.lateness_mean_s, facts.itl_p99_s) == (0.03, 0.01, 0.06)
    assert facts.lateness_share == pytest.approx(0.5)
    plain = write_run(tmp_path / "plain", [row.to_row()], summary={"itl_s": {"p99": 0.06}})
    assert TrialFacts.read(0, plain, frozenset()).lateness_p99_s is None


def test_a_closed_loop_and_a_server_without_cached_tokens_are_not_failures():
    facts = [fact(i % 2, open_loop_rate=None, observed_hit_rate=None) for i in range(6)]
    conditions = check_conditions(facts, ["A", "B"], 3, DEFAULT_TOLERANCES)
    by_name = {c.name: c for c in conditions.checks}
    assert conditions.matched
    assert (
        by_name["request_rate"].matched is None and "closed loop" in by_name["request_rate"].detail
    )
    assert by_name["hit_rate"].matched is None and "unknown" in by_name["hit_rate"].detail


def test_tolerances_parse_and_refuse_nonsense():
    parsed = parse_tolerances(["rate=0.2", "hit-rate=0.1", "engine-lateness=0.25"])
    assert parsed == replace(DEFAULT_TOLERANCES, rate=0.2, hit_rate=0.1, engine_lateness=0.25)
    for bad in ("speed=1", "rate", "rate=fast", "rate=-1"):
        with pytest.raises(InputError, match="--tolerance"):
            parse_tolerances([bad])


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def compared(base: dict[str, Output], new: dict[str, Output]) -> dict:
    comparison = OutputComparison(0.05)
    comparison.add(base, new)
    return encode(comparison.check())


def test_outputs_are_graded_from_identical_to_different():
    base = {
        "r1": Output((1, 2, 3, 4), (-1.0, -2.0, -0.70, -0.5)),
        "r2": Output((5, 6), (-1.0, -1.0)),
    }
    assert compared(base, base)["status"] == "identical" and compared(base, base)["consistent"]
    close = {"r1": Output((1, 2, 3, 4), (-1.0, -2.01, -0.7, -0.5)), "r2": base["r2"]}
    assert compared(base, close)["status"] == "within tolerance"
    flipped = {"r1": Output((1, 2, 7, 8), (-1.0, -2.001, -0.71, -0.9)), "r2": base["r2"]}
    near = compared(base, flipped)
    assert near["exact_match_rate"] == 0.5 and near["status"] == "near ties"
    assert near["consistent"] is False and near["first_divergence"]["near_ties"] == 1
    assert near["first_divergence"]["buckets"]["1-3"] == 1
    assert near["logprob_abs_diff"]["count"] == 4  # r1 before position 2, and r2
    assert near["logprob_abs_diff"]["max"] == pytest.approx(0.001)
    drifted = {"r1": Output((1, 2, 3, 4), (-1.0, -2.2, -0.7, -0.5)), "r2": base["r2"]}
    assert compared(base, drifted)["tokens_over_tolerance"] == 1
    assert compared(base, drifted)["status"] == "differs"
    other = {"r1": Output((9, 2, 3, 4), (-3.0, -2.0, -0.7, -0.5)), "r2": base["r2"]}
    assert compared(base, other)["status"] == "differs"  # a divergence that is no near tie
    blind = {k: Output(v.token_ids, None) for k, v in base.items()}
    assert compared(base, blind)["status"] == "within tolerance"
    assert compared(base, blind)["logprob_abs_diff"] is None
    assert compared({}, base)["status"] == "unknown" and compared({}, base)["consistent"] is None


def test_arms_are_labelled_and_trials_alternate():
    assert [a.label for a in make_arms([512, 2048], ["x", "y"])] == ["512", "2048"]
    assert [a.label for a in make_arms([2048, 2048], ["x", "y"])] == ["2048/A", "2048/B"]
    assert alternating(3, 2) == [(0, 1), (1, 1), (2, 1), (0, 2), (1, 2), (2, 2)]


def test_chunk_lists_and_launch_templates_are_checked():
    assert parse_chunks("512, 2048,4096") == [512, 2048, 4096]
    for bad in ("512", "512,x", "0,512"):
        with pytest.raises(InputError, match="--chunks"):
            parse_chunks(bad)
    template = LaunchTemplate.parse(
        "env PORT={port} serve --max-num-batched-tokens {chunk} --override '{\"a\": 1}'"
    )
    assert template.command(512, 8000) == [
        "env",
        "PORT=8000",
        "serve",
        "--max-num-batched-tokens",
        "512",
        "--override",
        '{"a": 1}',
    ]
    for bad, problem in (("serve {chunk}", "{port}"), ("serve 'open", "quotes"), ("", "empty")):
        with pytest.raises(InputError, match="--launch") as error:
            LaunchTemplate.parse(bad)
        assert problem in str(error.value)


def test_a_narrow_interval_on_too_little_data_names_its_actual_reason():
    """An A/A whose long-prompt TTFT rests on 12 values per arm (a p50 needs 20): the
    interval −0.1 % [−4.3, +4.4] lies inside ±10 %, yet the comparison is not trusted, and
    the verdict says so — never "cannot rule out a change of ±10 %" beside that interval."""
    base = decision({512: (90, 200), 2048: (90, 200)})
    few = "BASE and NEW: 12 values: a p50 needs 20 for 10 beyond it"

    def compare(a: int, b: int) -> dict[str, Comparison]:
        found = base.compare(a, b)
        ttft = Comparison.judge(
            "ttft_p50", 0.999, (0.957, 1.044), 0.9, (0.2, 0.1998), "bootstrap", 0.95,
            inconclusive=few, units=(12, 12), needed_units=20,
        )  # fmt: skip
        return found | {"ttft_p50": ttft}

    verdict = decide(replace(base, compare=compare), MATCHED)
    assert verdict.outcome == "inconclusive" and verdict.needed.units == 20
    assert "cannot rule out" not in verdict.sentence
    assert verdict.sentence.endswith(
        "p50 TTFT (512 vs 2048) −0.1 % [−4.3, +4.4] is not trusted: too little data "
        "(in both arms, 12 values: a p50 needs 20 for 10 beyond it); about 20 requests per "
        "arm would decide"
    )
