"""Damaged run directories through ``report``, ``diagnose`` and ``compare``: a parquet file
that is missing, empty, cut short or not parquet gives way to its journal with one warning
line; a garbage journal line is skipped and counted; an unreadable ``run.json`` or
``summary.json`` is one line naming the file and exit status 2. The run is a real bench run
of the embedded engine, damaged afterwards."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from bench_support import bench_cli

from prefillscope.cli import main
from runfmt.tables import RunTables

REQUESTS = 24


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pristine") / "run"
    done = bench_cli(
        "--workload", "shared-prefix", "--set", "groups=2", "--num-requests", str(REQUESTS),
        "--gpu-telemetry", "off", "--no-server-metrics", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def run(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(pristine, copy)
    return copy


def cli(monkeypatch, capsys, *args: str | Path) -> tuple[int, str]:
    """The real entry point in-process: exit status and stderr."""
    monkeypatch.setattr(sys, "argv", ["prefillscope", *map(str, args)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return int(exit_info.value.code or 0), capsys.readouterr().err


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:  # garbage
        path.write_bytes(b"not parquet at all\n" * 40)


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("prefillscope: warning:")]


@pytest.mark.parametrize("how", ["missing", "empty", "truncated", "garbage"])
def test_a_damaged_parquet_gives_way_to_its_journal_in_every_reader(
    monkeypatch, capsys, run: Path, how: str
) -> None:
    for table in ("requests", "chunks"):
        _damage(run / f"{table}.parquet", how)
    commands = {
        "report": ("report", "--json", run),
        "diagnose": ("diagnose", run, "--json"),
        "compare": ("compare", run, run),
    }
    for name, args in commands.items():
        monkeypatch.setattr("runfmt.journal._WARNED", set())
        code, err = cli(monkeypatch, capsys, *args)
        assert code == 0, (name, err)
        assert "Traceback" not in err
        if how == "missing":  # nothing is damaged: the journal is the table
            assert not _warnings(err), err
            continue
        warned = _warnings(err)
        assert len(warned) == 2, (name, err)  # one line per damaged table
        for table, line in zip(("requests", "chunks"), sorted(warned, reverse=True), strict=True):
            assert f"{table}.parquet is unreadable" in line and f"{table}.jsonl instead" in line
    assert len(RunTables(run).requests) == REQUESTS


def test_a_damaged_parquet_without_its_journal_is_one_line_and_exit_2(
    monkeypatch, capsys, run: Path
) -> None:
    _damage(run / "requests.parquet", "truncated")
    (run / "requests.jsonl").unlink()
    code, err = cli(monkeypatch, capsys, "report", run)
    assert code == 2
    assert err.count("\n") == 1 and "requests.parquet: is unreadable" in err, err
    assert "no journal" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["run.json", "summary.json"])
@pytest.mark.parametrize("content", [b'{"status": "compl', b"", b"[1, 2]", b"\xff\xfe garbage"])
def test_an_unreadable_run_document_is_one_line_naming_it_and_exit_2(
    monkeypatch, capsys, run: Path, name: str, content: bytes
) -> None:
    (run / name).write_bytes(content)
    commands: list[tuple[str | Path, ...]] = [("report", run)]
    if name == "run.json":  # diagnose and compare read run.json; report reads both
        commands += [("diagnose", run), ("compare", run, run)]
    for args in commands:
        code, err = cli(monkeypatch, capsys, *args)
        assert code == 2, (args[0], err)
        assert err.count("\n") == 1 and f"{run / name}:" in err, (args[0], err)
        assert "Traceback" not in err


def test_a_garbage_journal_line_is_skipped_and_counted_not_the_end_of_the_read(
    monkeypatch, capsys, run: Path
) -> None:
    (run / "requests.parquet").unlink()
    lines = (run / "requests.jsonl").read_text().splitlines(keepends=True)
    lines.insert(3, "}}garbage{{ not json\n")
    lines.insert(10, "42\n")
    (run / "requests.jsonl").write_text("".join(lines))
    code, err = cli(monkeypatch, capsys, "report", "--json", run)
    assert code == 0, err
    warned = _warnings(err)
    assert len(warned) == 1 and "skipped 2 unreadable lines" in warned[0], err
    assert len(RunTables(run).requests) == REQUESTS  # every real row, not 3
