"""A latency declared once, in a module of its own (``probes.metric_formulas.latency``:
its ``runfmt.metrics.Metric`` — names, unit, direction — with its inputs and formula),
reaches bench's ``summary.json``, ``compare`` and its gates, ``sweep``, ``simulate --json``
and the HTML report with no other edit. The toy lives in a temporary module, written and
imported by the test."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from toy_module import imported

from prefillscope.cli import main
from probes import metric_formulas
from runfmt import metrics

TOY = textwrap.dedent(
    '''
    """A toy latency: half the time from the actual send to the first token."""

    from probes.metric_formulas import latency
    from runfmt.metrics import Metric
    from runfmt.names import REQUESTS_TABLE


    def _half_wait(first, sent):
        return (first - sent) / 2


    HALF_WAIT = latency(
        Metric(
            key="half_wait_s",
            prefix="half_wait",
            label="half the wait for the first token",
            short="half wait",
            unit="s",
            higher_is_better=False,
            table=REQUESTS_TABLE,
            computed="(first token − actual send) / 2",
            headline=("p50",),
        ),
        inputs=("first_token_s", "sent_s"),
        formula=_half_wait,
    )
    '''
)
SMALL = ["--num-requests", "8", "--gpu", "off"]


@pytest.fixture
def toy(tmp_path):
    """The toy module imported from a temporary file (registered on import), removed after."""
    with imported(tmp_path, "toy_half_wait", TOY) as module:
        yield module
        metric_formulas.unregister("half_wait_s")


def _cli(monkeypatch, capsys, *argv: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["prefillscope", *argv])
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code or 0, capsys.readouterr().out


def test_a_toy_metric_in_its_own_module_reaches_every_view(toy, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    code, _ = _cli(
        monkeypatch, capsys, "bench", "--workload", "random", "--rate", "20", *SMALL,
        "--no-diagnosis", "--out", str(run),
    )  # fmt: skip
    assert code == 0
    summary = json.loads((run / "summary.json").read_text())
    half, sent = summary["half_wait_s"], summary["ttft_sent_s"]
    assert half["count"] == sent["count"] == 8
    assert half["p50"] == pytest.approx(sent["p50"] / 2)  # its formula, over its inputs

    code, out = _cli(
        monkeypatch, capsys, "compare", str(run), str(run), "--gate", "half_wait_p50:+10%",
        "--json",
    )  # fmt: skip
    assert code in (0, 1)  # judged (8 requests may be too few to tell: 1), not refused (2)
    gated = next(c for c in json.loads(out)["comparisons"] if c["metric"] == "half_wait_p50")
    assert gated["base"] == pytest.approx(half["p50"]) and gated["ratio"] == 1.0
    assert gated["gate"]["text"] == "half_wait_p50:+10%" and not gated["gate"]["failed"]

    page = tmp_path / "report.html"
    code, _ = _cli(monkeypatch, capsys, "report", str(run), "--html", str(page))
    assert code == 0
    assert "half the wait for the first token" in page.read_text()

    sweep = tmp_path / "sweep"
    code, _ = _cli(
        monkeypatch, capsys, "sweep", "--workload", "random", "--rates", "10,20", *SMALL,
        "--out", str(sweep),
    )  # fmt: skip
    assert code == 0
    points = json.loads((sweep / "sweep.json").read_text())["points"]
    assert len(points) == 2 and all(p["half_wait_p50_s"] > 0 for p in points)

    code, out = _cli(
        monkeypatch, capsys, "simulate", "--workload", "random", "--num-requests", "20",
        "--rate", "5", "--json",
    )  # fmt: skip
    assert code == 0
    assert "half_wait_s" in out


def test_without_the_module_the_name_is_unknown(tmp_path, monkeypatch, capsys) -> None:
    """The gate accepts the name only because the module registered it."""
    assert "half_wait_s" not in {m.key for m in metrics.latencies()}
    with pytest.raises(SystemExit) as exit_:
        monkeypatch.setattr(
            sys, "argv", ["prefillscope", "compare", str(tmp_path), str(tmp_path),
                          "--gate", "half_wait_p50:+10%"],
        )  # fmt: skip
        main()
    assert exit_.value.code == 2
    assert "half_wait_p50" in capsys.readouterr().err


def test_a_taken_name_is_refused() -> None:
    with pytest.raises(ValueError, match="ttft"):
        metric_formulas.latency(metrics.TTFT, inputs=(), formula=len)
