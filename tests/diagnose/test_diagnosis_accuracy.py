"""Every command a diagnosis prints is one the CLI accepts, for every accuracy scenario.

One draw of each scenario of ``benchmarks/diagnosis_accuracy.py`` (each planted cause and
a healthy control) is run against the embedded engine and diagnosed twice: as is, and
with an SLO it breaks (``itl=1ms``), so the hard-failure containment is printed too.
Each ``prefillscope bench …`` the findings and the decision print goes through the real
entry point with ``--dry-run``; each ``prefillscope diagnose ab …`` goes through the real
entry point up to the point where it would start the A/B (its flags, chunk sizes and
targets validated by the command itself), and its workload through ``bench --dry-run``.
Containment never proposes the chunk budget the server already has.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from functools import partial

import pytest
from diagnose_bench import dry_run, side_by_side
from repo_paths import ROOT

from diagnose.checklist import run_checklist
from diagnose.context import DiagnoseOptions
from prefillscope.cli import main
from probes.slo import parse_slo
from runfmt.diagnosis import Diagnosis

SPEC = importlib.util.spec_from_file_location(
    "diagnosis_accuracy", ROOT / "benchmarks/diagnosis_accuracy.py"
)
accuracy = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = accuracy  # its dataclasses look their module up by name
SPEC.loader.exec_module(accuracy)
COMMAND = re.compile(r"(?<!`)prefillscope (?:bench|diagnose ab) ")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


class AbStarted(Exception):
    """Raised where ``diagnose ab`` would start its trials: the command was accepted."""


def printed_commands(diagnosis: Diagnosis) -> list[str]:
    """Every ``prefillscope bench``/``diagnose ab`` command in the findings and decision."""
    texts = [f.next for f in [*diagnosis.hypotheses, diagnosis.prefix_cache]]
    texts.append(diagnosis.decision.recommendation)
    out = []
    for text in texts:
        for match in COMMAND.finditer(text):
            out.append(text[match.start() :].split(" — ")[0].strip())
    return out


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory) -> list[tuple[str, Diagnosis, Diagnosis]]:
    """Each scenario's run diagnosed as is and with a broken SLO. The runs wait on the
    embedded engine's clock far more than they compute, so a few go at once
    (``side_by_side``), thrash-x (~25 s of arrivals, the longest) first."""
    root = tmp_path_factory.mktemp("accuracy")
    scenarios = accuracy.draw(seed=11, repeats=1, controls=1)
    assert {s.name for s in scenarios} == set(accuracy.SCENARIOS)
    # an A/A is judged by the A/B, not diagnosed
    diagnosed = [s for s in scenarios if s.kind == "diagnose"]

    def diagnose(scenario) -> tuple[str, Diagnosis, Diagnosis]:
        run = accuracy.run(scenario, root / scenario.name)
        plain = run_checklist(run, accuracy.OPTIONS)
        breached = run_checklist(run, DiagnoseOptions(resamples=200, slo=parse_slo("itl=1ms")))
        return scenario.name, plain, breached

    longest_first = sorted(diagnosed, key=lambda s: s.name != "thrash-x")
    done = side_by_side({s.name: partial(diagnose, s) for s in longest_first})
    return [done[s.name] for s in diagnosed]


def _accept_ab(command: str, monkeypatch, capsys) -> None:
    seen = []

    async def start(options, progress):
        seen.append(options)
        raise AbStarted

    monkeypatch.setattr("session.ab_runner.run_ab", start)
    monkeypatch.setattr(sys, "argv", shlex.split(command))
    with pytest.raises(AbStarted):
        main()
    chunks = seen[0].chunks
    assert len(set(chunks)) == len(chunks) >= 2, command
    workload = command.replace("prefillscope diagnose ab", "prefillscope bench", 1)
    argv = shlex.split(workload)
    at = argv.index("--chunks")
    del argv[at : at + 2]
    if "--launch" in argv or "--a" in argv:  # a non-embedded target: the plan is what counts
        for flag in ("--launch", "--a", "--b"):
            if flag in argv:
                at = argv.index(flag)
                del argv[at : at + 2]
    assert dry_run(shlex.join(argv), monkeypatch, capsys)["requests"] > 0


def test_every_printed_command_is_accepted_by_the_cli(diagnosed, monkeypatch, capsys):
    checked = 0
    for name, plain, breached in diagnosed:
        for diagnosis in (plain, breached):
            for command in printed_commands(diagnosis):
                if command.startswith("prefillscope bench"):
                    assert dry_run(command, monkeypatch, capsys)["requests"] > 0, (name, command)
                else:
                    _accept_ab(command, monkeypatch, capsys)
                checked += 1
    assert checked >= 2 * len(diagnosed)


def test_containment_never_proposes_the_budget_the_server_has(diagnosed):
    for name, _, breached in diagnosed:
        decision = breached.decision
        assert decision.hard_failure, name
        budget = next(
            (
                e.value
                for e in breached.hypothesis("H1").evidence
                if e.name == "token budget per step"
            ),
            None,
        )
        for old, new in re.findall(r"from (\d+) to (\d+)", decision.recommendation):
            assert int(old) == budget and int(new) < budget, (name, decision.recommendation)
        assert f"set max_num_batched_tokens to {budget}" not in decision.recommendation
        for sizes in re.findall(r"--chunks (\S+)", decision.recommendation):
            chunks = [int(c) for c in sizes.split(",")]
            assert len(set(chunks)) == len(chunks) >= 2, (name, sizes)


def test_the_decision_follows_the_primary_finding(diagnosed):
    leads = {
        "H1": "A/B the chunk size before changing cache policy",
        "H2": "Profile the server",
        "H3": "Measure a smaller decode batch",
        "H4": "Measure at a lower load",
        "OL": "Measure the capacity",
        "PC": "Fix the prefix cache first",
        "CL": "Rerun from a client that keeps up",
        "none": "No cause stands out",
    }
    for name, plain, _ in diagnosed:
        lead = leads[plain.primary.finding]
        assert plain.decision.recommendation.startswith(lead), (name, plain.primary)
        if plain.primary.finding != "H1":
            assert "diagnose ab" not in plain.decision.recommendation, name


def test_a_wrong_primary_is_never_stated_with_confidence(diagnosed):
    """The benchmark's confident-wrong count, on this draw: a primary finding that is not
    the planted cause must say ``weak``."""
    scenarios = {s.name: s for s in accuracy.draw(seed=11, repeats=1, controls=1)}
    for name, plain, _ in diagnosed:
        named = accuracy.named(plain)
        if named != scenarios[name].expected:
            assert plain.primary.confidence == "weak", (name, named, plain.primary)
