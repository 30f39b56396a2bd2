"""``prefillscope runs [DIR]``: the runs under a folder, one row each — label, workload,
target, status and headline numbers — read through ``runfmt.run.open_run`` (the one
reader); a run whose documents cannot be read is listed with why, never skipped.

A run is a folder holding ``run.json``, found under DIR up to ``MAX_DEPTH`` folders down
(so the points of a sweep folder are listed, named ``sweep/rate-4``). Rows are in the
order the runs started (a run without a start time last). The headline numbers are the
summary's: completed of measured requests, TTFT p50 and p99, ITL p99 and the achieved
request rate; a run without ``summary.json`` (interrupted, still running) shows dashes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runfmt.metrics import REQUESTS_PER_S, RUNS_HEADLINE
from runfmt.names import RUN_JSON
from runfmt.run import open_run
from runfmt.runinfo import label_text
from runfmt.summary import Summary
from workloads.errors import InputError

#: Folders below DIR searched for runs (a sweep's points are two down from its parent).
MAX_DEPTH = 3


def run_folders(root: Path) -> list[Path]:
    """Every folder at or under ``root`` (``MAX_DEPTH`` down) that holds ``run.json``."""
    found = []
    level = [root]
    for _ in range(MAX_DEPTH + 1):
        found += [d for d in level if (d / RUN_JSON).is_file()]
        level = sorted(c for d in level for c in d.iterdir() if c.is_dir() and c.name[0] != ".")
    return found


def run_row(folder: Path, root: Path) -> dict[str, Any]:
    """One run's row: its name under ``root``, labels, workload, target, status, headline."""
    name = "." if folder == root else str(folder.relative_to(root))
    row: dict[str, Any] = {"run": name, "path": str(folder)}
    try:
        run = open_run(folder)
        info = run.require_info("RUN_DIR")
        summary = run.summary
    except InputError as exc:
        return row | {"status": "unreadable", "problem": exc.problem}
    target = info.target
    flavour = target.flavour or "?"
    embedded = bool(target.embedded)
    sections = summary or Summary()
    requests = sections.requests
    row |= {
        "labels": dict(info.labels),
        "workload": info.workload_name or "?",
        "target": "embedded" if embedded else f"{flavour} {target.url or ''}".strip(),
        "model": target.model,
        "status": info.status,
        "started_at": info.clock.started_at,
        "completed": requests.completed,
        "measured": requests.total,
        REQUESTS_PER_S.key: sections.throughput.requests_per_s,
    }
    for key, source, stat in RUNS_HEADLINE:
        value = sections.statistic(source, stat)
        row[key] = float(value) if isinstance(value, int | float) else None
    return row


def list_runs(root: Path, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The rows of every run under ``root`` in start order, those carrying every one of
    ``labels`` only when given; ``InputError`` for a folder that does not exist."""
    if not root.is_dir():
        raise InputError("DIR", f"{root} is not a folder", "give the folder runs are in")
    rows = [run_row(folder, root) for folder in run_folders(root)]
    if labels:
        rows = [r for r in rows if all(r.get("labels", {}).get(k) == v for k, v in labels.items())]
    return sorted(rows, key=lambda r: (r.get("started_at") is None, r.get("started_at") or ""))


def table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The rows as text cells for the terminal."""
    from prefillscope.report.numbers import fmt_duration

    def time(value: Any) -> str:
        return fmt_duration(value) if isinstance(value, int | float) else "–"

    header = ["run", "label", "workload", "target", "status", "done", "TTFT p50", "TTFT p99",
              "ITL p99", "req/s"]  # fmt: skip
    cells = []
    for r in rows:
        done = r.get("completed")
        measured = r.get("measured")
        rate = r.get(REQUESTS_PER_S.key)
        cells.append([
            r["run"],
            label_text(r.get("labels") or {}) or "–",
            str(r.get("workload", "–")),
            str(r.get("target", "–")),
            str(r.get("status")),
            f"{done}/{measured}" if isinstance(done, int) and isinstance(measured, int) else "–",
            *(time(r.get(key)) for key, _, _ in RUNS_HEADLINE),
            f"{rate:.2f}" if isinstance(rate, int | float) else "–",
        ])  # fmt: skip
    return header, cells


#: The columns of the two-line form's second line (under the run's name, indented).
SECOND_LINE = ("label", "workload", "target")


def render(rows: list[dict[str, Any]], width: int) -> list[str]:
    """The listing as text lines for a terminal ``width`` columns wide: one line a run
    when every column fits, else two (the numbers, then label · workload · target)."""
    header, cells = table(rows)
    sizes = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    if sum(sizes) + len(sizes) - 1 <= width:
        return [_line(header, sizes, 5), *(_line(c, sizes, 5) for c in cells)]
    first = [i for i, h in enumerate(header) if h not in SECOND_LINE]
    second = [i for i, h in enumerate(header) if h in SECOND_LINE]
    narrow = [sizes[i] for i in first]
    narrow[0] = max(3, min(narrow[0], width - sum(narrow[1:]) - len(narrow) + 1))
    legend = "  " + " · ".join(header[i] for i in second)
    lines = [_line([header[i] for i in first], narrow, 2), legend[:width]]
    for c in cells:
        lines.append(_line([c[i] for i in first], narrow, 2))
        lines.append(("  " + " · ".join(c[i] for i in second))[:width])
    return lines


def _line(cells: list[str], sizes: list[int], left: int) -> str:
    """``cells`` padded to ``sizes``: the first ``left`` to the left, numbers right."""
    out = []
    for i, (cell, size) in enumerate(zip(cells, sizes, strict=True)):
        text = cell if len(cell) <= size else cell[: size - 1] + "…"
        out.append(text.ljust(size) if i < left else text.rjust(size))
    return " ".join(out).rstrip()
