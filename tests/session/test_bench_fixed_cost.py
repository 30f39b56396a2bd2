"""A bench run's fixed cost: nothing heavy is imported before the run needs it.

A 16-request ``bench`` spends most of its CPU importing libraries, so what each stage
imports is its cost. These tests check, in a fresh interpreter and by ``sys.modules``
(never by a clock), that

* importing ``session.bench_runner`` — everything a run against an endpoint loads before
  its first request — loads no pandas or pyarrow (the end of the run needs pyarrow for
  the parquet tables), no httpx or tokenizers (a text prompt's tokenizer needs them),
  no pynvml (GPU sampling needs it), no PyYAML (a YAML spec file needs it);
* parsing a ``bench`` command line (typer) loads no pydantic: typer 0.29 builds a
  pydantic ``TypeAdapter`` for each option at every start, ~0.1 CPU-s, so the project
  requires an earlier typer;
* the probe process (``probes.probe_child``), a fresh interpreter per run, loads no
  pandas, numpy, pyarrow, aiohttp, httpx, pynvml or prometheus_client, nor the parent's
  side of the probes (``probes.probe_process``, ``runfmt.run``): it scrapes with
  the standard library, reads plain pages with ``probes.plain_exposition`` and imports
  NVML only when GPU sampling is on.

* a whole ``bench`` against the embedded engine, its end included (compaction, the
  summary with its server section, the end-of-run view), never loads pandas: its import
  alone was a fifth of a 16-request run's CPU (``runfmt.arrow_numpy``).

``benchmarks/fixed_cost_profile.py`` prints the CPU seconds these stand for.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: What ``session.bench_runner`` must not load, and why it would be wasted there.
NOT_BEFORE_THE_RUN = ("pandas", "pyarrow", "httpx", "tokenizers", "pynvml", "yaml", "scipy")
#: What the probe process must not load: the heavy libraries, and the parent's side of
#: the probes (``probes.probe_process``), which reads the run's tables (``runfmt.run``).
NOT_IN_THE_PROBE_PROCESS = (
    *("pandas", "numpy", "pyarrow", "aiohttp", "httpx", "pynvml", "scipy", "prometheus_client"),
    *("probes.probe_process", "runfmt.run", "runfmt.tables", "runfmt.runinfo"),
)


def _loaded_after(statement: str, candidates: tuple[str, ...]) -> list[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    modules = set(json.loads(done.stdout))
    return [name for name in candidates if name in modules]


def test_bench_runner_loads_nothing_the_run_does_not_need_yet() -> None:
    loaded = _loaded_after("import session.bench_runner", NOT_BEFORE_THE_RUN)
    assert loaded == [], f"importing session.bench_runner loads {loaded}"


def test_parsing_a_bench_command_line_loads_no_pydantic() -> None:
    """The whole command line is parsed (every option converted) before validation
    refuses ``--num-requests 0`` with exit 2; pydantic is never loaded."""
    statement = (
        "from prefillscope.cli import main; "
        "sys.argv = ['prefillscope', 'bench', '--endpoint', 'http://127.0.0.1:9', "
        "'--num-requests', '0', '--rate', '5', '--out', '/nonexistent/never-written']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 2, exc.code\n"
    )
    assert _loaded_after(statement, ("pydantic", "typer")) == ["typer"]


def test_the_probe_process_stays_light() -> None:
    loaded = _loaded_after("import probes.probe_child", NOT_IN_THE_PROBE_PROCESS)
    assert loaded == [], f"the probe process loads {loaded}"


def test_what_is_loaded_lazily_is_still_there_when_used() -> None:
    """The lazy imports are reached: the end of a run loads pyarrow (and no pandas), a
    sampler pynvml."""
    end = (
        "from runfmt.rundir import RunDir; import tempfile, pathlib; "
        "d = pathlib.Path(tempfile.mkdtemp()); run = RunDir(d, create=True); "
        "run.table('chunks').append({'request_id': 'r', 't_s': 0.5, 'n_tokens': 1}); "
        "run.close(); assert (d / 'chunks.parquet').exists(); "
        "from probes.latency import summarize; summarize(d); "
        "from probes.timeline import server_series; import prefillscope.summary_view"
    )
    assert _loaded_after(end, ("pandas", "pyarrow")) == ["pyarrow"]
    gpu = (
        "from probes.gpu import GpuSampler; from runtime.clock import RunClock; "
        "GpuSampler(RunClock()).available()"
    )
    assert _loaded_after(gpu, ("pynvml",)) == ["pynvml"]


def test_a_whole_bench_loads_no_pandas(tmp_path) -> None:
    """A 16-request bench against the embedded engine (which serves ``/metrics``, so the
    server section is computed), run as the CLI runs it, to its end. ``--no-diagnosis``:
    the closing diagnosis (``prefillscope.bench_ending``) is the checklist, an analysis of
    the finished run that reads its tables as DataFrames; the measurement, its files and
    its summary load no pandas."""
    out = tmp_path / "run"
    statement = (
        "from prefillscope.cli import main\n"
        f"sys.argv = ['prefillscope', 'bench', '--workload', 'system-prompt', "
        f"'--num-requests', '16', '--rate', '40', '--out', {str(out)!r}, '--no-diagnosis']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
    )
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    modules = set(json.loads(done.stdout.strip().splitlines()[-1]))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["completed"] == 16 and summary["server"]["available"]
    assert "pyarrow" in modules and "pandas" not in modules
