"""``isolation.json`` (``runfmt.isolation``): sections kept, versions checked."""

from __future__ import annotations

import pytest

from runfmt.isolation import ISOLATION_FORMAT_VERSION, IsolationResult
from runfmt.names import ISOLATION_JSON
from runfmt.rundir import RunDir
from workloads.errors import InputError


def test_a_written_result_reads_back_with_what_it_does_not_declare(tmp_path):
    sections = {"status": "complete", "verdict": {"verdict": "leaks"}, "power": {"x": 1}}
    run = RunDir(tmp_path, create=True)
    run.write_json(ISOLATION_JSON, IsolationResult.from_sections(sections).to_json())
    read = IsolationResult.read(run)
    assert read.verdict == {"verdict": "leaks"} and read.extra == {"power": {"x": 1}}
    assert read.format_version == ISOLATION_FORMAT_VERSION
    assert list(read.to_json())[:4] == ["format_version", "status", "verdict", "power"]


def test_a_newer_result_is_refused_naming_the_file(tmp_path):
    run = RunDir(tmp_path, create=True)
    run.write_json(ISOLATION_JSON, {"format_version": ISOLATION_FORMAT_VERSION + 1})
    with pytest.raises(InputError, match=r"isolation\.json"):
        IsolationResult.read(run)
