"""The ranking's rules on findings as the checks write them: links, order, confidence."""

from __future__ import annotations

from diagnose.client_limited import ClientHealth
from diagnose.ranking import ranked
from runfmt.diagnosis import CacheHealth, Finding, Status

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
    primary = ranked(found, QUIET)
    assert (primary.finding, primary.confidence) == ("PC", "strong")
    assert primary.secondary == ["H1"] and found["PC"].explains == ["H1"]
    assert "Explained by PC" in found["H1"].summary and "it explains H1" in primary.why


def test_the_step_level_finding_that_explains_more_decode_time_leads():
    found = _healthy()
    found["H1"] = _finding("H1", Status.SUPPORTED, 1.2, basis="server", impact=0.07)
    found["H3"] = _finding("H3", Status.SUPPORTED, 1.2, basis="server", impact=0.6)
    primary = ranked(found, QUIET)
    assert primary.finding == "H3" and primary.secondary == ["H1"]
    assert "it explains more of the decode time" in primary.why


def test_a_reading_at_its_threshold_is_weak_and_nothing_is_moderate_at_best():
    found = _healthy()
    found["H2"] = _finding("H2", Status.SUPPORTED, 1.04, basis="server", impact=0.2)
    assert ranked(found, QUIET).confidence == "weak"
    nothing = ranked(_healthy(), QUIET)
    assert (nothing.finding, nothing.confidence) == ("none", "moderate")


def test_a_hypothesis_registered_later_can_be_primary():
    found = _healthy() | {"H9": _finding("H9", Status.SUPPORTED, 2.0, basis="server")}
    primary = ranked(found, QUIET)
    assert primary.finding == "H9" and primary.confidence == "strong"
