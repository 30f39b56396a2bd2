"""``runfmt.version``: a document without a version is version 1, and a newer or malformed
one is refused naming the file (each document's ``from_json`` applies the rule; a summary
in a run directory is read so)."""

from __future__ import annotations

import pytest

from runfmt.rundir import RunDir
from runfmt.summary import SUMMARY_FORMAT_VERSION, Summary
from runfmt.version import FIRST_FORMAT_VERSION, document_version
from workloads.errors import InputError


def test_a_document_without_a_version_is_version_one():
    assert document_version({}, "x.json", 3) == FIRST_FORMAT_VERSION == 1
    assert document_version({"format_version": 3}, "x.json", 3) == 3


@pytest.mark.parametrize("version", [4, "2", True, 2.0])
def test_a_newer_or_malformed_version_is_refused_naming_the_file(version):
    with pytest.raises(InputError) as err:
        document_version({"format_version": version}, "/runs/a/summary.json", 3)
    assert err.value.field == "/runs/a/summary.json"
    assert "reads up to 3" in err.value.problem


def test_read_from_a_run_names_the_file_when_it_is_newer(tmp_path):
    run = RunDir(tmp_path, create=True)
    run.write_json("summary.json", {"format_version": SUMMARY_FORMAT_VERSION + 1})
    with pytest.raises(InputError) as err:
        Summary.read(run)
    assert err.value.field == str(tmp_path / "summary.json")
    run.write_json("summary.json", Summary.from_json({"requests": {"total": 5}}).to_json())
    assert Summary.read(run).requests.total == 5
