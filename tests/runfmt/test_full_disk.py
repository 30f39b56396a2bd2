"""A run directory on a real full disk (a tmpfs of two pages): a write cut short never
leaves a line that poisons the reader, the first failure is recorded and told, a parquet
file that does not fit leaves the journal and no damaged parquet, and the last documents
go into the space reserved for them."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from small_disk import small_tmpfs

from runfmt.journal import read_journal
from runfmt.rundir import RunDir, RunWriteError, write_failure_reason

ROW = {"id": "r", "note": "x" * 900}  # ~1 kB a line: a few fill a page


@pytest.fixture
def disk(tmp_path: Path):
    with small_tmpfs(tmp_path / "disk", "8k") as mounted:
        yield mounted


def _fill(run: RunDir, name: str) -> int:
    """Rows appended one burst at a time until the disk refuses one; rows it kept."""
    table = run.table(name)
    for burst in range(100):
        try:
            table.append_many([ROW | {"id": f"r{burst}-{i}"} for i in range(3)])
        except RunWriteError as exc:
            assert exc.errno == errno.ENOSPC
            return len(read_journal(run.path / f"{name}.jsonl"))
    raise AssertionError("the disk never filled")


def test_a_write_cut_short_keeps_whole_lines_and_the_run_is_told(disk: Path) -> None:
    run = RunDir(disk / "run", create=True)
    told: list[str] = []
    run.watch(told.append)
    kept = _fill(run, "requests")
    data = (run.path / "requests.jsonl").read_bytes()
    assert data.endswith(b"\n") and data.count(b"\n") == kept  # no torn piece left
    assert kept % 3 != 0  # the refused burst kept the lines that fitted, whole
    assert told == [f"no space left on {run.path}"] == [run.write_failure]
    with pytest.raises(RunWriteError):  # still full: refused again, told only once
        run.table("requests").append(ROW)
    assert told == [run.write_failure]
    assert len(read_journal(run.path / "requests.jsonl")) == kept


def test_a_torn_line_that_cannot_be_cut_back_is_ended_before_the_next_one(
    disk: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = RunDir(disk / "run", create=True)
    filler = disk / "filler"
    filler.write_bytes(bytes(4096))  # freed later: room for one more line

    def refused(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    with monkeypatch.context() as patched:  # the cut back fails: the torn piece stays
        patched.setattr(os, "ftruncate", refused)
        kept = _fill(run, "requests")
    assert not (run.path / "requests.jsonl").read_bytes().endswith(b"\n")
    filler.unlink()
    run.table("requests").append(ROW | {"id": "after"})
    rows = read_journal(run.path / "requests.jsonl").to_arrow()["id"].to_pylist()
    assert len(rows) == kept + 1 and rows[-1] == "after"  # the next line is not lost
    assert "skipped 1 unreadable line" in capsys.readouterr().err


def test_a_parquet_file_that_does_not_fit_leaves_the_journal_and_no_parquet(disk: Path) -> None:
    run = RunDir(disk / "run", create=True)
    kept = _fill(run, "requests")
    run.close()  # the compaction fails quietly: the journal is the table
    assert not list(run.path.glob("*.parquet*"))
    assert len(read_journal(run.path / "requests.jsonl")) == kept


def test_the_last_documents_go_into_the_reserve(disk: Path) -> None:
    run = RunDir(disk / "run", create=True)
    run.reserve(4096)
    _fill(run, "requests")
    run.write_json("run.json", {"status": "failed", "reason": run.write_failure})
    assert run.read_json("run.json")["reason"] == f"no space left on {run.path}"
    assert not (run.path / ".reserve").exists() and not list(run.path.glob("*.tmp"))


def test_write_failure_reasons() -> None:
    folder = Path("/runs/x")
    assert write_failure_reason(folder, OSError(errno.ENOSPC, "x")) == "no space left on /runs/x"
    readonly = write_failure_reason(folder, OSError(errno.EROFS, "Read-only file system"))
    assert readonly == "/runs/x is not writable (Read-only file system)"


def test_a_workers_journals_are_absorbed_whole_or_left_in_its_folder(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "12k") as disk:
        worker = RunDir(tmp_path / "worker", create=True)  # on the roomy disk
        worker.table("requests").append_many([ROW | {"id": f"w{i}"} for i in range(3)])
        worker.table("chunks").append_many([ROW | {"id": f"c{i}"} for i in range(12)])
        worker.close(compact=False)
        run = RunDir(disk / "run", create=True)
        with pytest.raises(RunWriteError):  # the requests fit, the chunks do not
            run.absorb_journals(worker.path, ["requests", "chunks"], {})
        assert (run.path / "requests.jsonl").read_bytes() == b""  # taken back: not twice
        assert (run.path / "chunks.jsonl").read_bytes() == b""
        small = RunDir(tmp_path / "small", create=True)
        small.table("requests").append(ROW)
        small.close(compact=False)
        assert run.absorb_journals(small.path, ["requests", "chunks"], {}) == {"requests": 1}
