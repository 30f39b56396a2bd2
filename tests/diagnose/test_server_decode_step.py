"""``diagnose.h2_host.server_step``: the server's own decode step, set against the
roofline at the batch the server says it carried. (H2's verdicts on whole runs:
``test_diagnose_checklist.py``.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from run_shapes import metric_row, steady_streams
from rundirs import write_run

from diagnose.context import DiagnoseOptions, build_context
from diagnose.h2_host import STEP_METRIC, STEP_TOKENS_METRIC, server_step
from diagnose.inputs import load_run_view
from perfmodel.config import EngineConfig

EMBEDDED = {"target": {"engine": dataclasses.asdict(EngineConfig()) | {"stream_interval": 1}}}


def _histogram(metric: str, count: float, total: float) -> list[dict]:
    rows = []
    for t, n, s in ((0.0, 0.0, 0.0), (1.0, count, total)):
        rows.append(metric_row(t, f"{metric}_bucket", n, kind="decode", le="+Inf"))
        rows.append(metric_row(t, f"{metric}_count", n, kind="decode"))
        rows.append(metric_row(t, f"{metric}_sum", s, kind="decode"))
    return rows


def _context(tmp_path, info, samples):
    records, chunks = steady_streams(4, 20, 0.02)
    return build_context(load_run_view(write_run(tmp_path / "r", records, chunks, info, samples)),
                         DiagnoseOptions())  # fmt: skip


def test_the_step_and_the_batch_come_from_the_servers_histograms(tmp_path):
    # 100 decode steps taking 1.5 s in all, carrying 600 tokens: 15 ms at a batch of 6
    samples = _histogram(STEP_METRIC, 100, 1.5) + _histogram(STEP_TOKENS_METRIC, 100, 600)
    ctx = _context(tmp_path, EMBEDDED, samples)
    reading = server_step(ctx, 500.0)
    assert (reading.step_s, reading.batch, reading.context) == (pytest.approx(0.015), 6, 500.0)
    expected = float(ctx.roofline.decode_step_s(np.array([6]), [500.0])[0])
    assert reading.expected_s == pytest.approx(expected)
    assert reading.ratio == pytest.approx(0.015 / expected)
    assert reading.source.startswith(f'server: {STEP_METRIC}{{kind="decode"}}')


def test_no_roofline_or_no_server_step_reads_nothing(tmp_path):
    steps = _histogram(STEP_METRIC, 100, 1.5)
    assert server_step(_context(tmp_path / "a", {"target": {"flavour": "vllm"}}, steps), 1) is None
    assert server_step(_context(tmp_path / "b", EMBEDDED, []), 1.0) is None
