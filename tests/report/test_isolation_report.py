"""The isolation folder in a report: content, terminal, page and JSON read one document."""

from __future__ import annotations

import io

import numpy as np
from rich.console import Console

from diagnose.isolation import Channel, Resolution, assess, cache_evidence
from diagnose.isolation_gap import ttft_gap
from prefillscope.report.html import render_isolation_html
from prefillscope.report.isolation import (
    COLUMNS,
    is_isolation_dir,
    isolation_content,
    isolation_dict,
    load_isolation,
)
from prefillscope.report.terminal import render_isolation
from runfmt.isolation import Experiment, IsolationResult, Secret, Settings, Tenants
from runfmt.names import ISOLATION_JSON
from runfmt.run_sections import TargetSection
from runfmt.rundir import RunDir

RNG = np.random.default_rng(3)


def _channel(hit_s: float, cached: int) -> Channel:
    gap = ttft_gap(RNG.normal(hit_s, 0.002, 20), RNG.normal(0.05, 0.002, 20), resamples=500)
    return Channel(gap, cache_evidence([cached] * 20, [0] * 20))


def _folder(tmp_path, cross: Channel):
    control = _channel(0.005, 512)
    verdict = assess(control, cross, Resolution(0.1, True))
    result = IsolationResult(
        status="complete",
        verdict=verdict,
        experiments=(
            Experiment(prefix_tokens=512, trials=20, control=control, cross=cross, verdict=verdict),
        ),
        tenants=Tenants(("salt:#0a7d9a15",), ("header:X-Tenant=#a3eb2070",)),
        settings=Settings(trials=20, warmup_trials=1, cache_between_trials="reset",
                          resolution="10% of the control's gap"),
        secret=Secret(source="random"),
        target=TargetSection(flavour="vllm", url="http://h:8000", model="<m>", embedded=False),
    )  # fmt: skip
    run = RunDir(tmp_path, create=True)
    run.write_json(ISOLATION_JSON, result.to_json())
    return tmp_path


def test_a_leak_reads_the_same_in_every_view(tmp_path):
    folder = _folder(tmp_path, _channel(0.005, 512))
    assert is_isolation_dir(folder) and not is_isolation_dir(tmp_path / "nowhere")
    result = isolation_content(load_isolation(folder), folder)
    assert (result.verdict, result.tone) == ("leaks", "bad")
    victim, attacker = result.rows
    assert victim[:2] == ["512", "victim"] and victim[-1] == "control"
    assert attacker[1] == "attacker" and attacker[4] == "20/20" and attacker[-1] == "leaks"
    assert attacker[5] == "1"  # a hit this clear needs one probe
    screen = io.StringIO()
    render_isolation(result, Console(file=screen, width=80))
    printed = screen.getvalue()
    assert " leaks " in printed and "512     attacker" in printed and "…" not in printed
    page = render_isolation_html(result)
    assert "tone-bad" in page and "&lt;m&gt;" in page and "<script" not in page
    as_json = isolation_dict(result, None)
    assert as_json["columns"] == COLUMNS and as_json["verdict"] == "leaks"


def test_an_isolated_result_is_good_news(tmp_path):
    result = isolation_content(load_isolation(_folder(tmp_path, _channel(0.05, 0))), tmp_path)
    assert (result.verdict, result.tone) == ("isolated", "good")
    assert result.rows[1][4] == "0/20" and result.rows[1][5] == "–"
