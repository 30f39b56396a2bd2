"""``diagnose.h2_host.server_step``: the server's own decode step, set against the
roofline at the batch the server says it carried. (H2's verdicts on whole runs:
``test_diagnose_checklist.py``.)"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from run_shapes import metric_row, steady_streams
from rundirs import write_run

from diagnose.context import DiagnoseOptions, build_context
from diagnose.h2_host import StepReading, below_margin, server_step
from diagnose.inputs import load_run_view
from diagnose.step_margin import StepMargin
from perfmodel.config import EngineConfig
from runfmt.diagnosis import Status
from runtime.engine_metrics import STEP_SECONDS as STEP_METRIC
from runtime.engine_metrics import STEP_TOKENS as STEP_TOKENS_METRIC

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


def _reading(step_ms: float, roofline_ms: float, low: float, high: float, below=0.0, steps=637):
    margin = StepMargin(step_ms / roofline_ms - 1, low, high, below, steps)
    return StepReading(step_ms / 1e3, roofline_ms / 1e3, "server: steps", 39, 400.0, margin)


def test_a_step_under_the_margin_is_reported_as_measured_never_as_the_gpus_work():
    """The l40s runs (qwen2.5-7b, ~40 running, 2 and 3 ms planted per step): under H2's
    10 % margin the sentence quotes the margin and its interval, and what would decide."""
    two = _reading(27.1, 25.06, 0.065, 0.096, steps=736)
    status, summary, _, basis = below_margin(two, two.margin, "")
    assert (status, basis) == (Status.NOT_SUPPORTED, "server")
    assert summary.startswith(
        "The server's mean decode step (27.1 ms at batch 39) is +8 % [+6, +10] over the "
        "roofline (736 steps): under the 10 % margin H2 names a cause from (2 ms per step"
    )
    assert "explains it" not in summary
    three = _reading(28.4, 25.4, 0.094, 0.140)
    status, summary, _, _ = below_margin(three, three.margin, "")
    assert status is None  # inconclusive: the interval reaches past the margin
    # half-width 0.023 against a distance 0.018 from the margin: 637 × (0.023/0.018)² steps
    needed = three.margin.steps_to_decide()
    assert needed == math.ceil(637 * (0.023 / (28.4 / 25.4 - 1.1)) ** 2) and needed > 637
    assert summary.endswith(
        f"+12 % [+9, +14] over the roofline (637 steps): under the 10 % margin at this many "
        f"steps, its interval reaching past it; about {needed:,} steps would decide."
    )
    # a rising excess keeps a below-margin reading weakened, not dismissed
    assert below_margin(two, two.margin, "; the excess grows")[0] == Status.WEAKENED


def test_only_a_step_at_the_roofline_is_the_gpus_work_and_a_patchy_excess_is_weakened():
    at = _reading(25.2, 25.4, -0.03, 0.01)
    status, summary, _, _ = below_margin(at, at.margin, "")
    assert status == Status.NOT_SUPPORTED
    assert summary.endswith("is -1 % [-3, +1] over the roofline (637 steps): the GPU's work "
                            "explains it.")  # fmt: skip
    straddles = _reading(28.0, 25.0, -0.03, 0.28)  # the "+12 % [-3, +28]"
    status, summary, _, _ = below_margin(straddles, straddles.margin, "")
    assert status is None and "+12 % [-3, +28] over the roofline" in summary
    assert "under the 10 % margin at this many steps" in summary and "explains" not in summary
    patchy = _reading(29.5, 25.4, 0.12, 0.2, below=0.3)
    status, summary, _, _ = below_margin(patchy, patchy.margin, "")
    assert status == Status.WEAKENED and "30 % of the steps lie wholly below" in summary
