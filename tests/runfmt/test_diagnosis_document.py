"""``diagnosis.json`` (``runfmt.diagnosis``) through the codec: figures written to six
significant digits (an unmeasured one null), keys it does not declare kept, a newer
version refused."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from runfmt.diagnosis import Decision, Diagnosis, Evidence, Finding, Primary
from workloads.errors import InputError


def _diagnosis() -> Diagnosis:
    evidence = [Evidence("mean step", np.float64(0.018176912345), "s", "server: steps")]
    finding = Finding(
        "H1", "Prefill chunks", "supported", "slow", evidence, [], "ab",
        strength=1.23456789, impact=math.nan, basis="server",
    )  # fmt: skip
    return Diagnosis(
        "runs/x",
        Decision(False, ("no hard failure",), "measure"),
        (finding,),
        None,
        Primary("H1", "strong", "why", ("H2",)),
    )


def test_a_diagnosis_writes_its_figures_clean_and_reads_back() -> None:
    doc = json.loads(json.dumps(_diagnosis().to_json()))
    (h1,) = doc["hypotheses"]
    assert h1["evidence"][0]["value"] == 0.0181769 and h1["strength"] == 1.23457
    assert h1["impact"] is None and h1["cost_s"] is None and h1["cost_how"] is None
    assert h1["basis"] == "server" and doc["prefix_cache"] is None
    assert doc["primary"]["secondary"] == ["H2"] and "format_version" not in doc
    read = Diagnosis.from_json(doc)
    assert read.hypothesis("H1").evidence[0].value == 0.0181769
    assert read.decision.reasons == ("no hard failure",) and read.primary is not None
    assert read.to_json() == doc


def test_keys_it_does_not_declare_are_kept() -> None:
    doc = json.loads(json.dumps(_diagnosis().to_json()))
    doc["hypotheses"][0]["evidence"][0]["interval"] = [0.01, 0.02]
    doc["from_the_future"] = 1
    read = Diagnosis.from_json(doc)
    assert read.hypotheses[0].evidence[0].extra["interval"] == [0.01, 0.02]
    assert json.loads(json.dumps(read.to_json())) == doc


def test_a_newer_diagnosis_is_refused() -> None:
    with pytest.raises(InputError, match=r"diagnosis\.json"):
        Diagnosis.from_json({"format_version": 2})
