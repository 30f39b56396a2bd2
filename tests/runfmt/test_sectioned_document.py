"""``runfmt.document`` and ``runfmt.version``: a document of named sections keeps what
it does not know, in order, and refuses a newer format naming the file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from runfmt.document import SectionedDocument
from runfmt.rundir import RunDir
from runfmt.version import FIRST_FORMAT_VERSION, document_version
from workloads.errors import InputError


@dataclass
class Doc(SectionedDocument):
    FILE: ClassVar[str] = "doc.json"
    FORMAT_VERSION: ClassVar[int] = 3

    alpha: dict[str, Any] = field(default_factory=dict)
    beta: list[Any] = field(default_factory=list)


def test_a_document_without_a_version_is_version_one():
    assert document_version({}, "x.json", 3) == FIRST_FORMAT_VERSION == 1
    assert document_version({"format_version": 3}, "x.json", 3) == 3


@pytest.mark.parametrize("version", [4, "2", True, 2.0])
def test_a_newer_or_malformed_version_is_refused_naming_the_file(version):
    with pytest.raises(InputError) as err:
        document_version({"format_version": version}, "/runs/a/summary.json", 3)
    assert err.value.field == "/runs/a/summary.json"
    assert "reads up to 3" in err.value.problem


def test_unknown_sections_go_to_extra_and_round_trip_in_their_order():
    doc = {"format_version": 2, "new": {"n": 1}, "beta": [1], "alpha": {"a": 1}}
    read = Doc.from_json(doc)
    assert (read.alpha, read.beta, read.extra) == ({"a": 1}, [1], {"new": {"n": 1}})
    assert read.format_version == 2
    written = read.to_json()
    assert list(written) == ["format_version", "new", "beta", "alpha"]
    assert written == {**doc, "format_version": 3}


def test_an_absent_section_stays_absent_unless_it_is_set():
    read = Doc.from_json({"alpha": {"a": 1}})
    assert list(read.to_json()) == ["format_version", "alpha"]
    read.beta = [2]
    assert read.to_json()["beta"] == [2]


def test_a_document_built_in_code_writes_every_section_in_declared_order():
    assert Doc(alpha={"a": 1}).to_json() == {"format_version": 3, "alpha": {"a": 1}, "beta": []}


def test_read_from_a_run_names_the_file_when_it_is_newer(tmp_path):
    run = RunDir(tmp_path, create=True)
    run.write_json("doc.json", {"format_version": 9, "alpha": {}})
    with pytest.raises(InputError) as err:
        Doc.read(run)
    assert err.value.field == str(tmp_path / "doc.json")
    run.write_json("doc.json", Doc(beta=[5]).to_json())
    assert Doc.read(run).beta == [5]
