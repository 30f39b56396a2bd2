"""Real bench runs for the diagnosis's integration tests: the embedded engine over loopback.

``bench`` is ``prefillscope bench`` in-process (``run_bench``): the engine is started on a
free port with the planted configuration (``--engine KEY=VALUE``), its ``/metrics`` are
scraped every 0.1 s, and the run directory is exactly what the command writes.
``side_by_side`` runs a few such benches at once, for a module's fixture of several runs.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from prefillscope.cli import main
from prefillscope.engine_flags import parse_engine_flags
from runfmt.diagnosis import Diagnosis, Finding
from session.bench_options import BenchOptions
from session.bench_runner import run_bench

#: The interference pattern the chunk-size hypothesis is about, sized to run in ~2 s:
#: four decode streams of 200 tokens, three 8192-token prompts dropped into them.
INTERFERENCE = {
    "num_requests": 3,
    "rate": 2,
    "concurrency": 4,
    "seed": 3,
    "stream_requests": 1,
    "stream_output_len": 200,
    "long_prompt_len": 8192,
}


def bench(
    out: Path,
    workload: str,
    overrides: dict[str, Any],
    engine: Sequence[str] = (),
    **options: Any,
) -> Path:
    """Run one bench against the embedded engine (or ``endpoint=``) and return its folder."""
    settings = parse_engine_flags(engine) if engine else None
    outcome = asyncio.run(
        run_bench(
            BenchOptions(
                workload,
                dict(overrides),
                engine=settings,
                out=out,
                gpu="off",
                metrics_interval_s=0.1,
                **options,
            )
        )
    )
    return outcome.run_dir


#: Runs at once in ``side_by_side``. A run against the embedded engine waits on the
#: engine's clock: its client and engine process use a small share of a core (the
#: accuracy scenarios: ~25 CPU-s over ~110 s of runs), so three at once keep a 2-core
#: machine well short of saturated.
AT_ONCE = 3
T = TypeVar("T")


def side_by_side(jobs: Mapping[str, Callable[[], T]], at_once: int = AT_ONCE) -> dict[str, T]:
    """Each job (a ``bench`` and what follows it), ``at_once`` at a time, each in its own
    thread (its own event loop and engine process), in the order given (longest first
    packs best): ``{name: result}``."""
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


def suggested_reruns(diagnoses: Iterable[Diagnosis]) -> set[str]:
    """Every ``prefillscope bench …`` command the findings suggest as their next step."""
    commands = set()
    for diagnosis in diagnoses:
        for finding in [*diagnosis.hypotheses, diagnosis.prefix_cache]:
            start = finding.next.find("prefillscope bench")
            if start >= 0:
                commands.add(finding.next[start:].split(" — ")[0])
    return commands


def dry_run(command: str, monkeypatch: pytest.MonkeyPatch, capsys) -> dict[str, Any]:
    """``command --dry-run --json`` through the real entry point: the plan's statistics."""
    monkeypatch.setattr(sys, "argv", [*shlex.split(command), "--dry-run", "--json"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0, (command, err)
    return json.loads(out)


def evidence_value(finding: Finding, name: str) -> float:
    """The value of ``finding``'s evidence called ``name``."""
    return next(e.value for e in finding.evidence if e.name == name)
