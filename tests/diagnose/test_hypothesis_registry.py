"""``diagnose.registry``: a hypothesis declared beside its ``assess`` is judged, ranked by
the latency it explains, shown, and followed by the decision box — with no edit anywhere
else. The toy lives in a temporary module, written and imported by the test."""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap

import pytest
from run_shapes import steady_streams
from rundirs import write_run
from toy_module import imported

from diagnose import registry
from diagnose.checklist import run_checklist, write_diagnosis
from diagnose.client_limited import ClientHealth
from diagnose.ranking import ranked
from perfmodel.config import EngineConfig
from prefillscope.cli import main
from runfmt.diagnosis import CacheHealth, Finding, Status

TOY = textwrap.dedent(
    '''
    """A toy hypothesis: the run had a gremlin (always, at three times its threshold)."""

    from diagnose.registry import Cost, hypothesis
    from runfmt.diagnosis import Evidence, Finding, Status


    def _cost(ctx, finding):
        return Cost(42.0, "one gremlin × 42 request-s")


    @hypothesis(
        id="HX",
        title="Gremlin in the scheduler",
        role="root",
        order=9,
        explains={"H2": "the gremlin's pauses are the host time H2 sees"},
        measure_first="Catch the gremlin before tuning anything",
        cost=_cost,
    )
    def assess(ctx):
        return Finding(
            "HX",
            "Gremlin in the scheduler",
            Status.SUPPORTED,
            "A gremlin paused the scheduler.",
            [Evidence("gremlin pauses", 3, "", "server: toy")],
            next="Feed it after midnight and compare: prefillscope bench --workload random",
            strength=3.0,
            basis="server",
        )
    '''
)


@pytest.fixture
def toy(tmp_path):
    """The toy module imported from a temporary file (registered on import), removed after."""
    with imported(tmp_path, "toy_gremlin", TOY) as module:
        yield module
        registry.unregister("HX")


def _run(tmp_path):
    config = dataclasses.asdict(EngineConfig())
    info = {"target": {"model": config["model"], "engine": config | {"stream_interval": 1}}}
    records, chunks = steady_streams(4, 100, 0.007)
    return write_run(tmp_path / "run", records, chunks, info)


def test_a_toy_hypothesis_in_its_own_module_is_judged_ranked_shown_and_followed(
    toy, tmp_path, capsys, monkeypatch
):
    run = _run(tmp_path)
    diagnosis = run_checklist(run)
    ids = [h.id for h in diagnosis.hypotheses]
    assert ids == ["H1", "H2", "H3", "H4", "OL", "CL", "H5", "HX"]  # shown in its order
    gremlin = diagnosis.hypothesis("HX")
    assert (gremlin.cost_s, gremlin.cost_how) == (42.0, "one gremlin × 42 request-s")
    assert (diagnosis.primary.finding, diagnosis.primary.confidence) == ("HX", "strong")
    assert "it explains about 42 request-s of latency" in diagnosis.primary.why
    assert diagnosis.decision.recommendation == (
        "Catch the gremlin before tuning anything: Feed it after midnight and compare: "
        "prefillscope bench --workload random"
    )
    doc = json.loads(write_diagnosis(run, diagnosis).read_text())
    assert doc["primary"]["finding"] == "HX" and doc["hypotheses"][-1]["cost_s"] == 42.0
    monkeypatch.setattr(sys, "argv", ["prefillscope", "diagnose", str(run)])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code in (0, None)
    out = capsys.readouterr().out
    assert "HX" in out and "Gremlin in the scheduler" in out and "Primary finding: HX" in out


def test_its_declared_link_makes_another_finding_secondary(toy):
    found = {
        "H2": Finding("H2", "host", Status.SUPPORTED, "H2 says so.", strength=2.0, basis="server"),
        "HX": Finding(
            "HX", "gremlin", Status.SUPPORTED, "HX says so.", strength=3.0, basis="server"
        ),
    }
    found, primary = ranked(found, ClientHealth(limited=False))
    assert primary.finding == "HX" and primary.secondary == ("H2",)
    assert "Explained by HX: the gremlin's pauses are the host time H2 sees" in found["H2"].summary


def test_candidates_rank_by_the_latency_they_explain_not_a_fixed_precedence():
    """H4 (declared before PC) leads when costs are unknown; once both say what they cost,
    the cause that explains more latency leads, and its rival is named with its cost."""

    def pair(h4_cost, pc_cost):
        return {
            "H4": Finding(
                "H4", "pool", Status.SUPPORTED, "H4.", strength=1.0, basis="server", cost_s=h4_cost
            ),
            "PC": Finding(
                "PC",
                "cache",
                CacheHealth.THRASHING,
                "PC.",
                strength=3.0,
                basis="server",
                cost_s=pc_cost,
            ),
        }

    quiet = ClientHealth(limited=False)
    assert ranked(pair(None, None), quiet)[1].finding == "H4"
    _, by_cost = ranked(pair(0.5, 7.2), quiet)
    assert by_cost.finding == "PC" and by_cost.secondary == ("H4",)
    assert "it outranks H4 (0.5 request-s) (it explains more latency)" in by_cost.why
    assert by_cost.confidence == "strong"  # 0.5 is far from 7.2: no close rival
    assert ranked(pair(9.0, 7.2), quiet)[1].finding == "H4"


def test_the_package_declares_every_built_in_and_a_bad_declaration_is_refused():
    ids = [d.id for d in registry.declared()]
    assert ids == ["H1", "H2", "H3", "H4", "OL", "CL", "H5", "PC"]
    assert all(d.module.startswith("diagnose.") for d in registry.declared())
    with pytest.raises(ValueError, match="role 'cause' is not one of"):
        registry.hypothesis(id="HY", title="t", role="cause", order=1)
    with pytest.raises(ValueError, match="declared twice"):
        registry.hypothesis(id="H1", title="t", role="step", order=1)(lambda ctx: None)
