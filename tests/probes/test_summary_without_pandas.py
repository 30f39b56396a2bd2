"""The client's statistics of ``summary.json`` without pandas (issue 29: its import was a
fifth of a small bench's CPU): ``probes.latency.summarize`` reads the run's tables as
numpy ``Columns`` and imports no pandas; the same functions given DataFrames (diagnose,
report) give the same summary, float for float; the counts keep pandas' ``value_counts``
order, ties included."""

from __future__ import annotations

import random
import subprocess
import sys

import pandas as pd
from repo_paths import FIXTURES, ROOT

from probes.latency import summarize, summarize_frames
from probes.percentiles import picked_percentiles
from probes.request_counts import error_messages
from runfmt.columns import Columns, counted
from runfmt.run import Run
from runfmt.slo import Slo
from runfmt.summary_sections import ErrorMessage
from runfmt.tables import CHUNKS, CLIENT, REQUESTS

GOLDEN_RUNS = [FIXTURES / "golden_v1" / "run", FIXTURES / "golden_v2" / "run"]
SLO = Slo(ttft_s=0.05, itl_s=0.02, e2e_s=1.0, tpot_s=0.01)


def test_a_run_s_summary_imports_no_pandas() -> None:
    body = (
        "import sys\nfrom probes.latency import summarize\nfrom runfmt.slo import Slo\n"
        f"summary = summarize({str(GOLDEN_RUNS[1])!r}, Slo(ttft_s=0.05, itl_s=0.02))\n"
        "assert summary.requests.total > 0 and summary.goodput.requests >= 0\n"
        "print('pandas' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", body], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_columns_and_frames_give_the_same_summary_float_for_float() -> None:
    for run in GOLDEN_RUNS:
        tables = Run.at(run).tables
        frames = summarize_frames(tables.requests, tables.chunks, tables.client, SLO)
        assert summarize(run, SLO).to_json() == frames.to_json()
        names = (REQUESTS.name, CHUNKS.name)
        columns = [tables.columns(name) for name in names]
        metrics, levels = ("ttft", "itl", "e2el", "tpot"), (50.0, 99.0, 99.9)
        assert picked_percentiles(*columns, metrics, levels) == picked_percentiles(
            tables.requests, tables.chunks, metrics, levels
        )
        assert (
            summarize(run).client == summarize_frames(*columns, tables.columns(CLIENT.name)).client
        )


def test_counts_keep_value_counts_order_ties_in_order_of_first_appearance() -> None:
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 30)
        kinds = [rng.choice("abcd") for _ in range(n)]
        words = [rng.choice([*"xyz", None]) for _ in range(n)]
        assert list(counted(kinds).items()) == list(pd.Series(kinds).value_counts().items())
        frame = pd.DataFrame({"status": ["error"] * n, "error_kind": kinds, "error_message": words})
        expected = (
            frame[["error_kind", "error_message"]]
            .fillna({"error_message": "(no message)"})
            .value_counts(sort=True)
            .head(5)
        )
        rows = tuple(ErrorMessage(m, k, int(c)) for (k, m), c in expected.items())
        table = Columns({name: frame[name].to_numpy(dtype=object) for name in frame.columns})
        assert error_messages(table) == rows == error_messages(frame)
