"""Advice in the server's own words: a run against llama.cpp or SGLang is told that server's
flags (``--batch-size``/``--ubatch-size``, ``--chunked-prefill-size``), never vLLM's.

The runs are the interference pattern of ``run_shapes`` (long prefills stalling decode
streams, so H1 is the primary finding) with the server's real ``/metrics`` scrapes
(``fixtures/llamacpp``: llama.cpp 0c1e570; ``fixtures/metrics``: SGLang 0.4.3's), recorded
as a bench against that server records them. An ITL SLO it breaks makes the decision a
containment, which names the flag to turn and its value.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from run_shapes import RunShape, scrape_rows
from rundirs import report_run

from diagnose.checklist import run_checklist
from diagnose.context import DiagnoseOptions
from probes.slo import parse_slo
from runfmt.diagnosis import Diagnosis
from runfmt.rundir import RunDir
from session.launcher import LaunchTemplate

SCRAPES = {
    "llamacpp": ("llamacpp/metrics-before.txt", "llamacpp/metrics-after.txt"),
    "sglang": ("metrics/sglang-0.4.3.post2-docs.prom", "metrics/sglang-0.4.3.post2-docs.prom"),
}
VLLM_WORDS = ("max_num_batched_tokens", "--max-num-batched-tokens", "max-num-seqs")


def _diagnose(path: Path, fixtures_dir: Path, flavour: str, budget: int | None) -> Diagnosis:
    report_run(path, RunShape(prefill_s=0.4, failures=0, long_prompts=8, diagnosis=False))
    run = RunDir(path)
    for t, name in zip((0.0, 30.0), SCRAPES[flavour], strict=True):
        run.table("server_metrics").append_many(scrape_rows((fixtures_dir / name).read_text(), t))
    run.close()
    info = run.read_json("run.json")
    info["target"] |= {"flavour": flavour, "model": "/models/small.gguf"}
    info["probes"] = {"server_metrics": {"flavour": flavour}}
    run.write_json("run.json", info)
    options = DiagnoseOptions(
        slo=parse_slo("itl=1ms"), max_num_batched_tokens=budget, resamples=200
    )
    return run_checklist(path, options)


def _advice(diagnosis: Diagnosis) -> str:
    """Every sentence a reader is told to act on: each finding's next step and what it
    lacked, the decision's recommendation (which holds the next measurement)."""
    doc = diagnosis.to_json()
    findings = [*doc["hypotheses"], doc["prefix_cache"]]
    parts = [f.get("next") or "" for f in findings] + [m for f in findings for m in f["missing"]]
    decision = doc["decision"]
    return "\n".join([*parts, decision["recommendation"]])


@pytest.fixture(scope="module")
def llamacpp(tmp_path_factory, fixtures_dir: Path) -> Diagnosis:
    return _diagnose(tmp_path_factory.mktemp("llamacpp") / "run", fixtures_dir, "llamacpp", None)


def test_a_llamacpp_run_is_told_batch_size_and_ubatch_size_never_vllms_flag(llamacpp):
    advice = _advice(llamacpp)
    h1 = llamacpp.hypothesis("H1")
    assert "llama.cpp's --batch-size/--ubatch-size" in " ".join(h1.missing)
    argv = shlex.split(h1.next)
    launch = argv[argv.index("--launch") + 1]
    assert launch == (
        "llama-server -m /models/small.gguf --batch-size {chunk} --ubatch-size {chunk} "
        "--port {port}"
    )
    assert not [word for word in VLLM_WORDS if word in json.dumps(llamacpp.to_json())]
    assert "--batch-size" in advice and "--ubatch-size" in advice


def test_the_llamacpp_ab_template_fills_both_flags_per_arm(llamacpp):
    argv = shlex.split(llamacpp.hypothesis("H1").next)
    template = LaunchTemplate.parse(argv[argv.index("--launch") + 1])
    assert template.command(256, 9001) == [
        "llama-server", "-m", "/models/small.gguf", "--batch-size", "256",
        "--ubatch-size", "256", "--port", "9001",
    ]  # fmt: skip


def test_a_llamacpp_containment_names_the_flags_and_their_new_value(tmp_path, fixtures_dir):
    diagnosis = _diagnose(tmp_path / "run", fixtures_dir, "llamacpp", budget=8192)
    decision = diagnosis.decision
    assert decision.hard_failure
    assert (
        "lower llama.cpp's --batch-size/--ubatch-size from 8192 to 2048 "
        "(--batch-size 2048 --ubatch-size 2048:" in decision.recommendation
    )
    assert not [word for word in VLLM_WORDS if word in json.dumps(diagnosis.to_json())]


def test_an_sglang_run_is_told_chunked_prefill_size(tmp_path, fixtures_dir):
    diagnosis = _diagnose(tmp_path / "run", fixtures_dir, "sglang", budget=8192)
    advice = _advice(diagnosis)
    assert "lower SGLang's --chunked-prefill-size from 8192 to 2048" in advice
    assert "--chunked-prefill-size {chunk}" in diagnosis.hypothesis("H1").next
    assert not [word for word in VLLM_WORDS if word in advice]
