"""Client-side attribution: the decode load at each gap, prefill windows, and the H1 ratio."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from run_shapes import RunShape, steady_streams
from rundirs import report_run, write_run

from diagnose.attribution import (
    LONG_PREFILL_TOKENS,
    attribute,
    decode_gaps,
    decode_load,
    overlapping,
    prefill_windows,
)
from diagnose.inputs import load_run_view
from loadgen.records import ChunkEvent, RequestRecord


def test_decode_load_counts_decoding_requests_and_interpolates_their_context(tmp_path):
    records = [
        RequestRecord(
            id="a", sent_s=0, first_token_s=0.0, end_s=10.0, prompt_tokens=100, output_tokens=11
        ),
        RequestRecord(
            id="b", sent_s=4, first_token_s=5.0, end_s=10.0, prompt_tokens=300, output_tokens=6
        ),
    ]
    view = load_run_view(write_run(tmp_path / "r", records, []))
    running, context = decode_load(view, np.array([2.0, 7.0, 10.0]))
    assert running.tolist() == [1, 2, 0]
    # a: 100 + 1.1 tokens/s × 7 s; b: 300 + 1.2 tokens/s × 2 s.
    assert context[0] == pytest.approx(100 + 1.1 * 2)
    assert context[1] == pytest.approx((100 + 1.1 * 7 + 300 + 1.2 * 2) / 2)
    assert np.isnan(context[2])


def test_prefill_windows_merge_and_skip_short_or_cached_prompts(tmp_path):
    records = [
        RequestRecord(id="long1", sent_s=1.0, first_token_s=2.0, prompt_tokens=4096),
        RequestRecord(id="long2", sent_s=1.5, first_token_s=2.5, prompt_tokens=4096),
        RequestRecord(id="short", sent_s=5.0, first_token_s=5.2, prompt_tokens=64),
        RequestRecord(
            id="cached", sent_s=7.0, first_token_s=7.1, prompt_tokens=4096, cached_tokens=4000
        ),
        RequestRecord(id="late", sent_s=9.0, first_token_s=9.5, prompt_tokens=1100),
    ]
    view = load_run_view(write_run(tmp_path / "r", records, []))
    windows = prefill_windows(view, LONG_PREFILL_TOKENS)
    assert windows.tolist() == [[1.0, 2.5], [9.0, 9.5]]
    assert len(prefill_windows(view)) == 5 - 1  # every prefill, the two overlapping merged


def test_gap_spans_and_overlap(tmp_path):
    records, chunks = steady_streams(1, 5, 0.1)  # tokens at 0.05, 0.15, … 0.45
    view = load_run_view(write_run(tmp_path / "r", records, chunks))
    gaps = decode_gaps(view)
    assert np.allclose(gaps.gap_s, 0.1) and len(gaps) == 4
    assert np.allclose(gaps.start_s, [0.05, 0.15, 0.25, 0.35])
    windows = np.array([[0.2, 0.22], [0.45, 0.5]])
    # Only the gap spanning 0.15–0.25 meets a window; one ending at a window's start does not.
    assert overlapping(gaps, windows).tolist() == [False, True, False, False]


def test_multi_token_chunks_split_their_gap(tmp_path):
    records = [
        RequestRecord(
            id="m", sent_s=0, first_token_s=0.1, end_s=0.7, prompt_tokens=10, output_tokens=5
        )
    ]
    chunks = [ChunkEvent("m", 0.1, 2), ChunkEvent("m", 0.4, 1), ChunkEvent("m", 0.7, 2)]
    gaps = decode_gaps(load_run_view(write_run(tmp_path / "r", records, chunks)))
    # The first chunk's extra token came with the first token (no gap); the last chunk's
    # two tokens share its 0.3 s, each spanning the whole chunk interval.
    assert np.allclose(gaps.gap_s, [0.3, 0.15, 0.15])
    assert np.allclose(gaps.start_s, [0.1, 0.4, 0.4])


@pytest.mark.parametrize(("prefill_s", "stretched"), [(0.4, True), (0.02, False)])
def test_gaps_riding_long_prefills_are_longer_only_when_prefills_stall(
    tmp_path, prefill_s, stretched
):
    run = report_run(
        tmp_path / "r",
        RunShape(prefill_s=prefill_s, failures=0, long_prompts=8, diagnosis=False, pool=None),
    )
    view = load_run_view(run)
    result = attribute(view, decode_gaps(view), resamples=400)
    assert result.windows == 8 and result.enough
    assert result.mean is not None
    if stretched:
        assert result.mean.significant and result.mean.ci_low > 2.0
    else:
        assert result.mean.ratio < 1.5


def test_few_streams_beside_the_stalls_leave_the_ratio_undecided_and_say_why(tmp_path):
    # 8 decode streams beside 5 stalls: enough gaps overlap them, from too few requests
    # (gaps beside one stall share it; the requests are the units resampled)
    shape = RunShape(decodes=8, long_prompts=5, duration_s=10.0, itl_s=0.1, failures=0)
    run = report_run(tmp_path / "r", replace(shape, diagnosis=False, pool=None))
    view = load_run_view(run)
    result = attribute(view, decode_gaps(view), resamples=400)
    assert result.enough and result.mean is not None and result.mean.ratio > 2
    assert not result.mean.significant
    words = result.mean.inconclusive
    assert words is not None and re.fullmatch(r"overlapping: \d requests \(fewer than 10\)", words)
