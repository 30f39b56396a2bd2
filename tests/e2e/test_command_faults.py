"""Every command under the faults ``bench`` already survives (issue 43): a full disk, a
dying and a lying server, a damaged run directory, absurd numbers.

Each test runs the real ``prefillscope`` command line in a process of its own and checks
the exit status, the one line on stderr (never a traceback), and what was kept: a failed
write leaves no 0-byte or temporary file and the earlier complete document as it was.
The absurd-number test takes every numeric option of every command from the command's
own option list (click's), so a flag added tomorrow is covered without a line here.

``pytest -s`` prints the fault table: ``FAULT command | fault | exit | line``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import fault_server
import forked_cli
import pytest
from small_disk import fill, small_tmpfs

from runtime.atomic import EXIT_WRITE_FAILED
from session.exit_status import EXIT_REQUESTS_FAILED

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()"]
SERVER_FLAGS = ["--backend", "vllm", "--model", fault_server.MODEL, "--vocab-size", "32000"]
#: A tiny shared-prefix plan, no server metrics or GPU telemetry: runs against the fault server.
TINY_PLAN = [
    "--no-server-metrics", "--gpu-telemetry", "off", "--workload", "shared-prefix",
    "--set", "groups=1", "--set", "prefix_len=16", "--set", "suffix_len=8", "--set", "output_len=4",
]  # fmt: skip


def cli(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, **kwargs)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command's one line on stderr (asserting there is no traceback)."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("prefillscope:")]
    assert lines, done.stderr
    return lines[-1]


def table_row(command: str, fault: str, done: subprocess.CompletedProcess[str]) -> str:
    line = one_line(done) if done.returncode else "(none)"
    row = f"FAULT {command} | {fault} | exit {done.returncode} | {line}"
    print(row)
    return line


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A small complete bench run against the fault server (no fault)."""
    out = tmp_path_factory.mktemp("runs") / "run"
    proc, url = fault_server.start("none")
    try:
        done = cli(
            "bench", "--endpoint", url, *SERVER_FLAGS, *TINY_PLAN,
            "--num-requests", "12", "--concurrency", "2", "--out", str(out),
        )  # fmt: skip
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 0, done.stderr
    yield out


def no_debris(folder: Path) -> None:
    """No temporary file, and no 0-byte file, in ``folder``."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.endswith(".tmp")], files
    assert not [p for p in files if p.stat().st_size == 0 and p.suffix != ".jsonl"], files


# -- a full disk ----------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["report", "export", "simulate"])
def test_a_page_or_file_on_a_full_disk_is_exit_6_and_leaves_nothing(
    command: str, run_dir: Path, tmp_path: Path
) -> None:
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        fill(disk)
        target = disk / "out.file"
        args = {
            "report": ["report", str(run_dir), "--html", str(target)],
            "export": ["export", str(run_dir), "--out", str(target)],
            "simulate": ["simulate", "--workload", "shared-prefix", "--num-requests", "20",
                         "--html", str(target)],
        }[command]  # fmt: skip
        done = cli(*args)
        line = table_row(command, "full disk", done)
        assert done.returncode == EXIT_WRITE_FAILED, done.stderr
        assert f"no space left on {disk}" in line and "nothing written there" in line
        assert not target.exists()
        no_debris(disk)


def test_diagnose_on_a_full_disk_keeps_the_earlier_diagnosis(run_dir: Path, tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        run = disk / "run"
        subprocess.run(["cp", "-r", str(run_dir), str(run)], check=True)
        first = cli("diagnose", str(run), "--json")
        assert first.returncode == 0, first.stderr
        before = (run / "diagnosis.json").read_bytes()
        fill(disk)
        done = cli("diagnose", str(run), "--slo", "ttft=1ms")
        line = table_row("diagnose", "full disk", done)
        assert done.returncode == EXIT_WRITE_FAILED
        assert "diagnosis.json: the earlier one kept" in line
        assert (run / "diagnosis.json").read_bytes() == before  # still whole, still readable
        json.loads(before)
        no_debris(run)


def test_compare_never_turns_a_failed_step_summary_into_a_verdict(
    run_dir: Path, tmp_path: Path
) -> None:
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        fill(disk)
        env = os.environ | {"GITHUB_STEP_SUMMARY": str(disk / "summary.md")}
        done = cli("compare", str(run_dir), str(run_dir), env=env)
    table_row("compare", "full disk ($GITHUB_STEP_SUMMARY)", done)
    assert done.returncode == 0, done.stderr  # two identical runs: the gate's own verdict
    assert "warning: $GITHUB_STEP_SUMMARY" in done.stderr and "Traceback" not in done.stderr


def test_compare_names_a_step_summary_that_is_a_folder(run_dir: Path, tmp_path: Path) -> None:
    """Before: 'cannot write to PARENT (Is a directory)', naming the folder it is in."""
    folder = tmp_path / "summary.md"
    folder.mkdir()
    done = cli(
        "compare", str(run_dir), str(run_dir), env=os.environ | {"GITHUB_STEP_SUMMARY": str(folder)}
    )
    table_row("compare", "$GITHUB_STEP_SUMMARY a folder", done)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert f"not written: {folder} is a folder; the verdict stands" in done.stderr, done.stderr


def test_a_sweep_on_a_full_disk_stops_with_exit_6_and_no_knee_from_it(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        done = cli(
            "sweep", "--rates", "20,40", "--workload", "shared-prefix", "--set", "prefix_len=16",
            "--set", "suffix_len=8", "--set", "output_len=4", "--num-requests", "3000",
            "--metrics-interval", "0.05", "--engine", "fixed_step_s=0.002",
            "--gpu-telemetry", "off", "--out", str(disk / "sweep"),
        )  # fmt: skip
        line = table_row("sweep", "full disk", done)
        assert done.returncode == EXIT_WRITE_FAILED, done.stderr
        assert f"no space left on {disk / 'sweep'}" in line and "point rate-20" in line
        sweep = disk / "sweep" / "sweep.json"
        if sweep.exists():  # the points before the failed one; never the failed one as a knee
            assert json.loads(sweep.read_text())["points"] == []
        no_debris(disk / "sweep")


def test_diagnose_ab_on_a_full_disk_is_exit_6(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        fill(disk)
        done = cli(
            "diagnose", "ab", "--workload", "interference", "--num-requests", "4",
            "--chunks", "512,2048", "--out", str(disk / "ab"),
        )  # fmt: skip
        line = table_row("diagnose ab", "full disk", done)
        assert done.returncode == EXIT_WRITE_FAILED, done.stderr
        assert "no space left on" in line
        no_debris(disk)


def test_isolation_on_a_full_disk_is_exit_6(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        out = disk / "iso"
        out.mkdir()
        fill(disk)
        done = cli("isolation", "--trials", "3", "--prefix-tokens", "64", "--out", str(out))
        line = table_row("isolation", "full disk", done)
        assert done.returncode == EXIT_WRITE_FAILED, done.stderr
        assert "isolation.json: nothing written there" in line
        no_debris(out)


# -- a dying and a lying server -------------------------------------------------------------
def isolation_against(fault: str, out: Path) -> subprocess.CompletedProcess[str]:
    proc, url = fault_server.start(fault)
    try:
        return cli(
            "isolation", "--endpoint", url, *SERVER_FLAGS, "--prefix-tokens", "256",
            "--trials", "10", "--out", str(out), "--json",
        )  # fmt: skip
    finally:
        proc.kill()
        proc.wait()


def test_isolation_against_a_server_that_dies_is_failed(tmp_path: Path) -> None:
    done = isolation_against("die-after:20", tmp_path / "iso")
    line = table_row("isolation", "dying server", done)
    doc = json.loads((tmp_path / "iso" / "isolation.json").read_text())
    print(f"  verdict: {doc['verdict']['sentence']}")
    assert done.returncode == EXIT_REQUESTS_FAILED
    assert doc["status"] == "failed" and "measured requests failed" in doc["reason"]
    assert (doc["verdict"]["verdict"], doc["verdict"]["by"]) == ("inconclusive", "failed_probes")
    assert "isolation failed" in line
    assert "nan" not in json.dumps([doc["verdict"], doc["experiments"]]).replace("NaN", "")


def test_isolation_against_a_server_whose_cached_tokens_lie(tmp_path: Path) -> None:
    done = isolation_against("lying-cache", tmp_path / "iso")
    table_row("isolation", "lying server", done)
    doc = json.loads((tmp_path / "iso" / "isolation.json").read_text())
    sentence = doc["verdict"]["sentence"]
    print(f"  verdict: {doc['verdict']['verdict']}: {sentence}")
    assert done.returncode == 0 and doc["status"] == "complete"
    assert "cached_tokens contradict themselves" in sentence and "timing alone" in sentence
    assert doc["verdict"]["by"] != "cached_tokens"  # its counts decide nothing
    (exp,) = doc["experiments"]
    assert exp["cross"]["cached_tokens"]["fresh_cached"] == 10
    assert "nan" not in sentence


def test_a_sweep_against_a_server_that_dies_says_where_it_stopped_and_why(tmp_path: Path) -> None:
    """The server dies during the second point (30 completions: the first point's 20 and
    each point's test request). Before: exit 3 with the point's live line last on the
    screen and no word of why."""
    proc, url = fault_server.start("die-after:30")
    try:
        done = cli(
            "sweep", "--endpoint", url, *SERVER_FLAGS, *TINY_PLAN,
            "--rates", "10,20", "--num-requests", "20", "--out", str(tmp_path / "sweep"),
        )  # fmt: skip
    finally:
        proc.kill()
        proc.wait()
    line = table_row("sweep", "dying server", done)
    assert done.returncode == 3
    assert "sweep stopped at point rate-20 (interrupted: server at" in line, line
    assert "stopped answering" in line and "1 complete point before it, the knee at 10" in line
    sweep = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert sweep["knee"] == 10 and [p["status"] for p in sweep["points"]] == [
        "complete",
        "interrupted",
    ]


# -- a damaged run directory ----------------------------------------------------------------
READERS = {
    "report": lambda run: ["report", str(run)],
    "diagnose": lambda run: ["diagnose", str(run)],
    "export": lambda run: ["export", str(run)],
}


def _self_links(run: Path) -> None:
    for name in ("requests.parquet", "requests.jsonl"):
        (run / name).unlink()
        (run / name).symlink_to(name)  # a link to itself: there, and never readable


def _truncated_parquet(run: Path) -> None:
    data = (run / "requests.parquet").read_bytes()
    (run / "requests.parquet").write_bytes(data[: len(data) // 2])
    (run / "requests.jsonl").unlink()


def _folder_parquet(run: Path) -> None:
    (run / "requests.parquet").unlink()
    (run / "requests.parquet").mkdir()
    (run / "requests.jsonl").unlink()


def _garbage_journal(run: Path) -> None:
    (run / "requests.parquet").unlink()
    (run / "requests.jsonl").write_bytes(b'\x00\xffgarbage\nnot json\n[1, 2]\n"a string"\n')


def _foreign_parquet(run: Path) -> None:
    (run / "requests.parquet").write_bytes((run / "chunks.parquet").read_bytes())
    (run / "requests.jsonl").unlink()


#: Request tables that are there and cannot be read, and what the one line says.
DAMAGES = {
    "self-links": (_self_links, "requests.parquet: is unreadable"),
    "truncated parquet": (_truncated_parquet, "requests.parquet: is unreadable (Parquet"),
    "a folder named requests.parquet": (_folder_parquet, "is unreadable (Is a directory)"),
    # before: exit 0, 'skipped 4 unreadable lines' and a report of no requests
    "a journal of garbage only": (_garbage_journal, "not one of its 4 lines is a readable row"),
    # before: exit 0 without a word, an export of a header and no rows
    "another table's parquet": (_foreign_parquet, "not a requests table: no column id"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_an_unreadable_request_table_gets_the_same_one_line_from_every_reader(
    damage: str, run_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(run_dir), str(run)], check=True)
    plant, says = DAMAGES[damage]
    plant(run)
    lines = set()
    for command, args in READERS.items():
        done = cli(*args(run))
        lines.add(table_row(command, f"damaged table ({damage})", done))
        assert done.returncode == 2
    assert len(lines) == 1, lines  # the same answer in all three
    line = lines.pop()
    assert says in line and "the run directory is damaged" in line, line


def _empty_journal(run: Path) -> None:
    (run / "requests.parquet").unlink()
    (run / "requests.jsonl").write_bytes(b"")


def _cut_journal(run: Path, keep: int = 5) -> None:
    (run / "requests.parquet").unlink()
    lines = (run / "requests.jsonl").read_bytes().splitlines(keepends=True)
    (run / "requests.jsonl").write_bytes(b"".join(lines[:keep]))


def test_a_request_table_emptied_is_refused_alike_by_every_reader(
    run_dir: Path, tmp_path: Path
) -> None:
    """A 0-byte journal (no parquet) while summary.json counts 12 requests. Before: exit 0
    in report, diagnose and export without a word (an export of a header only)."""
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(run_dir), str(run)], check=True)
    _empty_journal(run)
    lines = set()
    for command, args in READERS.items():
        done = cli(*args(run))
        lines.add(table_row(command, "damaged table (0-byte journal)", done))
        assert done.returncode == 2
    assert len(lines) == 1, lines
    line = lines.pop()
    assert "requests.jsonl: holds 0 of the 12 requests summary.json counts" in line, line
    assert "the run directory is damaged" in line


def test_a_request_table_cut_short_is_read_with_the_same_warning_by_every_reader(
    run_dir: Path, tmp_path: Path
) -> None:
    """5 of the 12 rows left (a journal cut after its fifth line). Before: every reader
    took the 5 as the whole run without a word."""
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(run_dir), str(run)], check=True)
    _cut_journal(run)
    for command, args in READERS.items():
        done = cli(*args(run))
        print(f"FAULT {command} | damaged table (5 of 12 rows) | exit {done.returncode} | "
              f"{one_line(done)}")  # fmt: skip
        assert done.returncode == 0, done.stderr
        warnings = [x for x in done.stderr.splitlines() if "holds 5 of the 12" in x]
        assert warnings == [
            f"prefillscope: warning: {run / 'requests.jsonl'}: holds 5 of the 12 requests "
            "summary.json counts; read from those 5 (the run directory is damaged: rerun "
            "the bench or restore the file)"
        ], done.stderr
    exported = cli("export", str(run)).stdout.splitlines()
    assert len(exported) == 1 + 5


@pytest.mark.parametrize("damage", ["self-links", "a journal of garbage only"])
def test_calibrating_from_a_damaged_run_gives_the_readers_one_line(
    damage: str, run_dir: Path, tmp_path: Path
) -> None:
    """``simulate --calibrate`` reads the request table first. Before: it complained of
    the engine fields the run lacks, never reaching the damaged table."""
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(run_dir), str(run)], check=True)
    DAMAGES[damage][0](run)
    reader = one_line(cli("export", str(run)))
    done = cli("simulate", "--calibrate", str(run), "--num-requests", "5")
    line = table_row("simulate --calibrate", f"damaged table ({damage})", done)
    assert done.returncode == 2 and line == reader, (line, reader)


@pytest.mark.parametrize(
    "gate, says",
    [
        ("itl_p99:+" + "1" + "0" * 30 + "%", "is no limit for a latency (X must be at most 900 %)"),
        ("itl_p99:+1e30%", "is not METRIC:+X%"),
        ("output_tokens_per_s:+100%", "is no limit for a throughput (X must be below 100 %)"),
    ],
)
def test_a_gate_no_regression_could_fail_is_refused(
    gate: str, says: str, run_dir: Path, tmp_path: Path
) -> None:
    """Before: ``--gate itl_p99:+10^30%`` was taken (a gate that passes anything)."""
    done = cli("compare", str(run_dir), str(run_dir), "--gate", gate, timeout=60)
    line = table_row("compare", f"absurd gate {gate[:24]}", done)
    assert done.returncode == 2 and line.startswith("prefillscope: error: --gate:"), line
    assert says in line, line


def test_rows_of_the_wrong_types_are_skipped_and_counted_alike(
    run_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(run_dir), str(run)], check=True)
    (run / "requests.parquet").unlink()
    with open(run / "requests.jsonl", "a") as fh:
        fh.write('{"id": 5, "status": null, "ttft_ms": "fast"}\n')
    for command, args in READERS.items():
        done = cli(*args(run))
        print(f"FAULT {command} | damaged table (wrong types) | exit {done.returncode} | "
              f"{one_line(done)}")  # fmt: skip
        assert done.returncode == 0
        assert "requests.jsonl: skipped 1 unreadable line" in done.stderr
    exported = cli("export", str(run)).stdout.splitlines()
    assert len(exported) == 1 + 12  # the header and the 12 real rows, no phantom


# -- absurd numbers, every numeric option of every command ----------------------------------
def numeric_options() -> list[tuple[str, str, str]]:
    """``(command path, flag, int|float)`` for every numeric option the CLI has."""
    from typer.main import get_command

    from prefillscope.app import build_app

    found = []

    def walk(cmd, path: tuple[str, ...]) -> None:
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, (*path, name))
        for param in getattr(cmd, "params", []):
            if param.param_type_name == "option" and param.type.name in ("int", "float"):
                flag = next(o for o in param.opts if o.startswith("--"))
                found.append((" ".join(path), flag, param.type.name))

    walk(get_command(build_app()), ())
    return found


#: What each command needs besides the flag to run at all (a flag refused or not), with
#: ``{out}`` a fresh folder and ``{run}`` a bench run. A new command must be added here.
BASE_ARGS = {
    "bench": ["--dry-run", "--workload", "shared-prefix", "--num-requests", "5"],
    "sweep": ["--rates", "1", "--workload", "shared-prefix", "--num-requests", "3",
              "--out", "{out}"],
    "simulate": ["--workload", "shared-prefix", "--num-requests", "5"],
    "calc chunks": ["--budget", "512", "--prompt", "2048"],
    "calc prefix": ["--prompt", "2048", "--cached-prefix", "1024"],
    "calc kv": ["--tokens", "2048"],
    "compare": ["{run}", "{run}"],
    "diagnose run": ["{run}"],
    "diagnose ab": ["--workload", "interference", "--chunks", "512,2048", "--num-requests", "4",
                    "--out", "{out}"],
    "isolation": ["--trials", "3", "--prefix-tokens", "64", "--out", "{out}"],
    "probe": ["http://127.0.0.1:9"],
    "serve": ["--port", "0"],
}  # fmt: skip
ABSURD = {"int": ("1" + "0" * 30, "-" + "1" + "0" * 30), "float": ("1e300", "-1e300", "nan")}


@pytest.mark.slow
@pytest.mark.parametrize("command, flag, kind", numeric_options())
def test_an_absurd_number_is_one_line_naming_the_flag(
    command: str, flag: str, kind: str, run_dir: Path, tmp_path: Path
) -> None:
    assert command in BASE_ARGS, f"no base arguments for the command {command!r}: add them"
    for i, value in enumerate(ABSURD[kind]):
        out = tmp_path / f"out{i}"
        base = [a.format(out=out, run=run_dir) for a in BASE_ARGS[command]]
        path = command.split()
        path = path[:1] if path == ["diagnose", "run"] else path  # ``diagnose RUN_DIR``
        done = cli(*path, *base, flag, value, timeout=60)
        line = one_line(done)
        assert done.returncode == 2, (value, done.returncode, line)
        assert flag in line, (value, line)
        assert not out.exists() or not any(out.iterdir()), "nothing written"


# -- absurd numbers in --set keys and in trace fields ---------------------------------------
def set_keys() -> list[tuple[str, str]]:
    """``(workload, key)`` for every ``--set`` key: each family's own keys (from its
    params), and the load keys every family shares (once)."""
    from workloads import registry
    from workloads.params import known_keys
    from workloads.spec import _LOAD_KEYS

    found = [("shared-prefix", key) for key in _LOAD_KEYS]
    for name in registry.FAMILY_NAMES:
        if name not in registry.FILE_FAMILIES:
            found += [(name, key) for key in known_keys(registry.family(name).params)]
    return found


ABSURD_SET = ("1e308", "1" + "0" * 30, "-1", "nan", "inf")


def _refused_in_one_line_or_taken(label: str, key: str, code: int, err: str) -> None:
    assert "Traceback" not in err, (label, err)
    assert code in (0, 2), (label, code, err[-300:])  # -9: killed after 30 s
    if code == 2:
        line = [x for x in err.splitlines() if x.startswith("prefillscope:")][-1]
        assert key in line, (label, line)


@pytest.mark.slow
def test_every_set_key_of_every_workload_takes_an_absurd_value_in_one_line(
    tmp_path: Path,
) -> None:
    """``bench --dry-run`` (the plan and its split over workers) with each absurd value in
    each key: refused in one line naming the key, or taken (a name such as tenant "-1",
    rate inf). Before: rate=1e308 ended in OverflowError (the planned token rate), and
    tenants=10^30 and loras=10^30 built names until killed."""
    cases = [(w, k, v) for w, k in set_keys() for v in ABSURD_SET]
    argvs = [["bench", "--dry-run", "--workload", w, "--set", f"{k}={v}"] for w, k, v in cases]
    for (workload, key, value), (code, err) in zip(
        cases, forked_cli.run_all(argvs, tmp_path), strict=True
    ):
        _refused_in_one_line_or_taken(f"{workload} --set {key}={value}", key, code, err)


def whole_keys() -> list[tuple[str, str, tuple[str, ...]]]:
    """``(workload, key, values)`` for every ``--set`` key whose values are whole numbers
    (an int knob, a distribution of token counts), with fractional values for it."""
    import dataclasses
    import typing

    from workloads import registry
    from workloads.distributions import Distribution
    from workloads.spec import _LOAD_KEYS

    found = [("shared-prefix", k, ("2.5",)) for k, (kind, _) in _LOAD_KEYS.items() if kind is int]
    for name in registry.FAMILY_NAMES:
        if name in registry.FILE_FAMILIES:
            continue
        params = registry.family(name).params
        hints = typing.get_type_hints(params)
        for f in dataclasses.fields(params):
            if hints[f.name] is int:
                found.append((name, f.name, ("2.5",)))
            elif hints[f.name] is Distribution and f.metadata.get("whole", True):
                found.append((name, f.name, ("2.5", "uniform:2.5-10", "uniform:2-10.5")))
    return found


@pytest.mark.slow
def test_a_fraction_in_a_whole_number_key_is_refused_in_one_line(tmp_path: Path) -> None:
    """Every integer-valued ``--set`` key of every workload given a fraction. Before:
    ``prefix_len=2.5`` was taken as 2 and ``uniform:2.5-10`` as 3 to 10, without a word."""
    cases = [(w, k, v) for w, k, values in whole_keys() for v in values]
    assert any(key == "prefix_len" for _, key, _ in cases)  # the keys were found
    argvs = [["bench", "--dry-run", "--workload", w, "--set", f"{k}={v}"] for w, k, v in cases]
    for (workload, key, value), (code, err) in zip(
        cases, forked_cli.run_all(argvs, tmp_path), strict=True
    ):
        assert "Traceback" not in err, (workload, key, value, err)
        lines = [x for x in err.splitlines() if x.startswith("prefillscope:")]
        assert code == 2 and lines, (workload, key, value, code, err[-300:])
        assert key in lines[-1] and "whole number" in lines[-1], (workload, key, lines[-1])


TRACE = Path(__file__).parent.parent / "fixtures" / "traces" / "mooncake_synthetic_trace.jsonl"
ABSURD_FIELD = (1e308, 10**30, 604_800_001, -1, 2.5, True, "x", None)
#: Values of the other fields that must be refused: a timestamp is >= 0 (milliseconds
#: from the trace's start; before, -1 was taken), a hash id within the 2^63 block keys
#: (before, 10^30 was folded onto another id's key).
REFUSED_FIELD = {("timestamp", -1), ("timestamp", 10**30), ("hash_ids", -1), ("hash_ids", 10**30)}


@pytest.mark.slow
@pytest.mark.parametrize("command", [["bench", "--dry-run"], ["simulate"]])
def test_every_trace_field_takes_an_absurd_value_in_one_line(
    command: list[str], tmp_path: Path
) -> None:
    """Every field of a Mooncake trace row (the fixture's own keys) with each absurd value
    on its second row. Before: output_length 10^30 was an OverflowError in bench and taken
    by simulate, 604,800,001 built a plan until killed."""
    first, second = (json.loads(line) for line in TRACE.read_text().splitlines()[:2])
    cases, argvs = [], []
    for field in first:
        for value in ABSURD_FIELD:
            if field == "hash_ids":
                value = [value] * len(second["hash_ids"])
            path = tmp_path / f"trace-{len(cases)}.jsonl"
            path.write_text(json.dumps(first) + "\n" + json.dumps(second | {field: value}) + "\n")
            cases.append((field, value, path.name))
            argvs.append([*command, "--workload", f"trace:{path}", "--num-requests", "2"])
    results = forked_cli.run_all(argvs, tmp_path)
    for (field, value, name), (code, err) in zip(cases, results, strict=True):
        _refused_in_one_line_or_taken(f"{field}={value!r}", name, code, err)  # names the file
        if field in ("input_length", "output_length") and value is not None:
            assert code == 2, (field, value)  # no token count but a whole one in range
        if (field, value[0] if isinstance(value, list) else value) in REFUSED_FIELD:
            assert code == 2, (field, value, err[-300:])


#: Flags whose value is text carrying numbers (lists, KEY=VALUE, P:D): click types them
#: ``str``, so ``numeric_options`` does not find them; each with ``{v}`` for the value.
TEXT_NUMBERS = {
    "--chunks": ["simulate", "--workload", "shared-prefix", "--num-requests", "5",
                 "--chunks", "512,{v}"],
    "--rate": ["bench", "--dry-run", "--workload", "shared-prefix", "--num-requests", "5",
               "--rate", "1,{v}"],
    "--prefix-tokens": ["isolation", "--trials", "3", "--prefix-tokens", "64,{v}",
                        "--out", "{out}"],
    "--engine": ["simulate", "--workload", "shared-prefix", "--num-requests", "5",
                 "--engine", "fixed_step_s={v}"],
    "--slo": ["diagnose", "{run}", "--slo", "ttft={v}ms"],
    "--disaggregate": ["simulate", "--workload", "shared-prefix", "--num-requests", "5",
                       "--disaggregate", "1:{v}"],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("flag", list(TEXT_NUMBERS))
def test_numbers_inside_text_flags_are_refused_in_one_line(
    flag: str, run_dir: Path, tmp_path: Path
) -> None:
    """Before: ``--disaggregate 1:10^30`` built decode workers until killed, and
    ``--slo ttft=1e308ms`` was taken (every request met it)."""
    values = ("1e308", "1" + "0" * 30, "-1", "nan")
    argvs = [
        [a.format(v=v, run=run_dir, out=tmp_path / f"out{i}") for a in TEXT_NUMBERS[flag]]
        for i, v in enumerate(values)
    ]
    for value, (code, err) in zip(values, forked_cli.run_all(argvs, tmp_path), strict=True):
        assert "Traceback" not in err, (value, err)
        lines = [x for x in err.splitlines() if x.startswith("prefillscope:")]
        assert code == 2 and lines and flag in lines[-1], (value, code, err[-300:])
