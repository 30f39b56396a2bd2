"""The ranking's rules on findings as the checks write them: links, order, confidence."""

from __future__ import annotations

from diagnose.client_limited import ClientHealth
from diagnose.ranking import ranked
from runfmt.diagnosis import CacheHealth, Evidence, Finding, Status

QUIET = ClientHealth(limited=False)


def _finding(hid: str, status: str, strength: float | None, **kw) -> Finding:
    return Finding(hid, f"{hid} title", status, f"{hid} says so.", strength=strength, **kw)


def _healthy() -> dict[str, Finding]:
    found = {
        h: _finding(h, Status.NOT_SUPPORTED, 0.3, basis="server") for h in ["H1", "H2", "H3", "H4"]
    }
    found["OL"] = _finding("OL", Status.NOT_APPLICABLE, None)
    found["CL"] = _finding("CL", Status.NOT_SUPPORTED, 0.1, basis="client")
    found["PC"] = _finding("PC", CacheHealth.AS_EXPECTED, None, basis="server")
    return found


def test_thrashing_explains_the_prefills_h1_blames():
    found = _healthy()
    found["H1"] = _finding("H1", Status.SUPPORTED, 3.0, basis="server", impact=0.4)
    found["PC"] = _finding("PC", CacheHealth.THRASHING, 2.5, basis="server")
    found, primary = ranked(found, QUIET)
    assert (primary.finding, primary.confidence) == ("PC", "strong")
    assert primary.secondary == ("H1",) and found["PC"].explains == ["H1"]
    assert "Explained by PC" in found["H1"].summary and "it explains H1" in primary.why


def test_the_step_level_finding_that_explains_more_decode_time_leads():
    found = _healthy()
    found["H1"] = _finding("H1", Status.SUPPORTED, 1.2, basis="server", impact=0.07)
    found["H3"] = _finding("H3", Status.SUPPORTED, 1.2, basis="server", impact=0.6)
    found, primary = ranked(found, QUIET)
    assert primary.finding == "H3" and primary.secondary == ("H1",)
    assert "it explains more of the decode time" in primary.why


def test_a_reading_at_its_threshold_is_weak_and_nothing_is_moderate_at_best():
    found = _healthy()
    found["H2"] = _finding("H2", Status.SUPPORTED, 1.04, basis="server", impact=0.2)
    assert ranked(found, QUIET)[1].confidence == "weak"
    _, nothing = ranked(_healthy(), QUIET)
    assert (nothing.finding, nothing.confidence) == ("none", "moderate")


def test_a_hypothesis_registered_later_can_be_primary():
    found = _healthy() | {"H9": _finding("H9", Status.SUPPORTED, 2.0, basis="server")}
    found, primary = ranked(found, QUIET)
    assert primary.finding == "H9" and primary.confidence == "strong"


def _thrashing(pool: float, working: float) -> Finding:
    evidence = [
        Evidence("KV pool", pool, "blocks", "server: num_gpu_blocks"),
        Evidence("prefix working set", working, "blocks", "oracle replay"),
    ]
    return _finding("PC", CacheHealth.THRASHING, 3.2, basis="server", evidence=evidence, cost_s=7.2)


def _preempting(preemptions: int, strength: float, cost_s: float) -> Finding:
    evidence = [Evidence("preemptions", preemptions, "", "server")]
    return _finding(
        "H4", Status.SUPPORTED, strength, basis="server", evidence=evidence, cost_s=cost_s
    )


def test_a_pool_a_third_of_the_working_set_is_the_one_root_cause_of_thrashing_and_preemption():
    """The issue's shape: 875 blocks against a 2,566-block working set, 2 preemptions. The
    pool explains H4 and H1; the primary names it, whatever the order H4 was declared in."""
    found = _healthy()
    found["H1"] = _finding("H1", Status.SUPPORTED, 5.7, basis="server", impact=0.23, cost_s=6.4)
    found["H4"] = _preempting(2, strength=1.0, cost_s=0.46)
    found["PC"] = _thrashing(875, 2566)
    found, primary = ranked(found, QUIET)
    assert (primary.finding, primary.confidence) == ("PC", "strong")
    assert found["PC"].explains == ["H4", "H1"] and primary.secondary == ("H4", "H1")
    assert (
        "Explained by PC: the pool too small for the prefixes' working set" in found["H4"].summary
    )
    cause = "the KV pool size (875 blocks, 34 % of the 2,566-block working set)"
    assert f"One root cause: {cause}; it produces H4, H1." in found["PC"].summary
    assert f"one root cause: {cause}" in primary.why
    # what follows from it is weighed in the sentence too: its own cost is the smaller part
    assert (
        "it explains H4 (supported, 0.46 request-s), H1 (supported, 6.4 request-s), which "
        "follow from it" in primary.why
    )
    assert "by itself it costs about 7.2 request-s of latency" in primary.why


def test_preemptions_explain_h1_only_when_their_recompute_is_most_of_the_prefill():
    """diagnosis_accuracy --seed 6's h4 run: an A100 at budget 512, 8 preemptions that
    recomputed 38 % of the prefill computed. H1 (4.5× a decode step) stood on the
    admissions alone — the same run on a pool that never preempted: H1 at 1.2× its
    threshold — so H4 does not explain it: both are candidates, weighed by cost."""

    def preempting(share: float) -> Finding:
        evidence = [
            Evidence("preemptions", 8, "", "server"),
            Evidence("recomputed share of the prefill", share, "%", "server × client"),
        ]
        return _finding(
            "H4", Status.SUPPORTED, 12.2, basis="server", evidence=evidence, cost_s=3.35
        )

    found = _healthy()
    found["H1"] = _finding("H1", Status.SUPPORTED, 1.11, basis="server", impact=0.2, cost_s=3.57)
    found["H4"] = preempting(38.0)
    final, primary = ranked(found, QUIET)
    assert final["H4"].explains == [] and "Explained by H4" not in final["H1"].summary
    assert (primary.finding, primary.confidence) == ("H1", "weak")  # H4 close behind
    assert primary.secondary == ("H4",)
    # the recompute most of the prefill: the stretched steps are the recomputes
    found["H4"] = preempting(70.0)
    final, primary = ranked(found, QUIET)
    assert final["H4"].explains == ["H1"] and "Explained by H4" in final["H1"].summary
    assert primary.finding == "H4" and primary.secondary == ("H1",)


def test_overload_explains_h4s_queue_not_its_preemptions():
    def overloaded() -> Finding:
        return _finding("OL", Status.SUPPORTED, 3.1, basis="server", cost_s=150.0)

    found = _healthy()
    found["OL"] = overloaded()
    found["H4"] = _preempting(18, strength=11.3, cost_s=56.0)
    final, primary = ranked(found, QUIET)
    assert final["OL"].explains == [] and "Explained by OL" not in final["H4"].summary
    assert primary.finding == "OL" and primary.secondary == ("H4",)  # weighed by cost
    queued = [
        Evidence("preemptions", 0, "", "server"),
        Evidence("waiting requests (max)", 9, "", "server"),
    ]
    found["H4"] = _finding("H4", Status.SUPPORTED, 1.02, basis="server", evidence=queued)
    final, primary = ranked(found, QUIET)
    assert final["OL"].explains == ["H4"] and "Explained by OL" in final["H4"].summary
    assert primary.finding == "OL" and primary.secondary == ("H4",)


def test_a_pool_that_holds_the_working_set_names_no_root_cause_and_h4_stands():
    found = _healthy()
    found["H4"] = _preempting(30, strength=4.0, cost_s=9.0)
    found["PC"] = _thrashing(3000, 2566)  # thrashing, yet the pool holds the working set
    found, primary = ranked(found, QUIET)
    assert primary.finding == "H4" and "One root cause" not in found["PC"].summary
    assert found["PC"].explains == []


def test_the_ranking_builds_new_findings_and_leaves_the_checks_own_as_written():
    """Capping (a client-limited run) and linking make new findings: the ones the checks
    wrote keep their status, summary and ``explains``, so a finding is never edited after
    it is made."""
    found = _healthy()
    found["H1"] = _finding("H1", Status.SUPPORTED, 3.0, basis="server", impact=0.4)
    found["H2"] = _finding("H2", Status.SUPPORTED, 2.0, basis="client")
    found["PC"] = _finding("PC", CacheHealth.THRASHING, 2.5, basis="server")
    written = dict(found)
    limited = ClientHealth(limited=True, reasons=("loop lag",), itl_share=0.6)
    final, primary = ranked(found, limited)
    assert found == written and all(found[h] is written[h] for h in written)
    assert found["PC"].explains == [] and found["H1"].summary == "H1 says so."
    assert found["H2"].status == Status.SUPPORTED
    assert final["H2"].status == Status.INCONCLUSIVE  # capped: its reading is the client's
    assert final["H2"].summary.startswith("Capped at inconclusive (was supported)")
    assert final["PC"].explains == ["H1"] and "Explained by PC" in final["H1"].summary
    assert primary.finding == "PC"
