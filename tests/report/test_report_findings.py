"""``prefillscope.report.findings``: the diagnosis as the report shows it, from the
``Diagnosis`` the run was opened with (parsed once, not per line of the page)."""

from __future__ import annotations

from dataclasses import replace

from run_shapes import planted_diagnosis

from prefillscope.report.findings import decision, evidence_line, findings, primary_line, tone
from runfmt.diagnosis import Diagnosis, Evidence, Primary


def test_findings_come_in_order_with_the_prefix_cache_last(tmp_path):
    diagnosis = planted_diagnosis(tmp_path, "detail")
    assert [f.id for f in findings(diagnosis)] == ["H1", "H2", "H3", "H4", "PC"]
    assert findings(None) == [] and findings(Diagnosis.from_json({})) == []


def test_evidence_reads_name_value_unit_source_and_detail():
    line = evidence_line(Evidence("ITL ratio", 18.2, "x", "client: chunks", "gaps"))
    assert line == "ITL ratio: 18.2 x — client: chunks (gaps)"
    assert evidence_line(Evidence("count", None, "", "")) == "count: unknown"


def test_the_decision_opens_with_the_primary_finding_when_there_is_one(tmp_path):
    diagnosis = planted_diagnosis(tmp_path, "d")
    hard, reasons, text = decision(diagnosis)
    assert hard is True and reasons == ["ITL p99 0.410 s breaches the SLO itl<=0.05 s"]
    assert text.startswith("Contain now") and primary_line(diagnosis) is None
    primary = Primary(finding="H1", confidence="strong", why="18x longer gaps.")
    hard, _, text = decision(replace(diagnosis, primary=primary))
    assert text.startswith("Primary finding: H1 (strong confidence) — 18x longer gaps. Contain")


def test_an_unknown_status_is_muted():
    assert tone("no such status") == "muted"
