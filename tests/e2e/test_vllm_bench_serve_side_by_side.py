"""``vllm bench serve``'s command line pasted into ``prefillscope bench``, side by side with
the real ``vllm bench serve`` (the vLLM target's own install) on the same server.

One command line, vLLM's form, with ``--max-concurrency`` (so the headline must be timed
from the actual send, as vLLM times it), ``--goodput``, the percentiles and
``--save-result --save-detailed``: run by vLLM, then by us, twice each in turn (vLLM,
ours, vLLM, ours) on the shared target. Both result files must have the same keys; the
counts must agree; and each tool's TTFT, TPOT, ITL and E2E (median and mean) must agree
within the noise — the run-to-run difference of each tool with itself on this shared
machine, times two, and never tighter than a floor (``FLOOR_MS``, ``FLOOR_SHARE``). The
figures are printed (``-s``).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from real_vllm import MODEL_DIR, VllmServer

pytestmark = pytest.mark.real_vllm

CLI = MODEL_DIR.parents[1] / "venv" / "bin" / "vllm-cpu-cli"
#: vLLM's command line, as a vLLM user writes it (``{url}``, ``{tokenizer}`` and
#: ``{dir}`` filled in; ``--result-filename`` added per run).
LINE = (
    "--backend openai --base-url {url} --endpoint /v1/completions --model tiny-llama "
    "--tokenizer {tokenizer} --dataset-name random --num-prompts 40 --max-concurrency 4 "
    "--random-input-len 256 --random-output-len 32 --ignore-eos --seed 0 --disable-tqdm "
    "--goodput ttft:500 tpot:50 --percentile-metrics ttft,tpot,itl,e2el "
    "--metric-percentiles 50,90,99 --save-result --save-detailed --result-dir {dir}"
)
#: Mean and median of each, but ITL's p90 for its median: vLLM's client stamps each
#: event of one buffered read microseconds apart, as we do (a read of n tokens: its gap,
#: then n - 1 zeros), so the median ITL sits between two modes (~0 and a decode step)
#: and swings with the machine's load for either tool (0.005 ms and 16 ms seen for vLLM
#: itself on two runs); it is printed, not compared.
COMPARED = [
    *(f"{stat}_{m}_ms" for m in ("ttft", "tpot", "e2el") for stat in ("mean", "median")),
    "mean_itl_ms",
    "p90_itl_ms",
]
SHOWN = [*COMPARED, "median_itl_ms"]
#: The least disagreement called noise: a few ms, or half of vLLM's figure. On a shared
#: 2-core machine serving from the CPU the two clients do not see quite the same server:
#: vLLM's Python client stamps its send before it builds the request and its first token
#: after it parses the event, and its own CPU (~8 CPU-s a run) slows the CPU server it
#: measures. Over seven alternating pairs here its mean TTFT was 0.8 to 1.75 times ours
#: (E2E 1.0 to 2.0 times), the ratio following the machine's load; on an idle machine or
#: a GPU server the share left for it is far more than needed.
FLOOR_MS = 5.0
FLOOR_SHARE = 0.5


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


@pytest.mark.timeout(900)
def test_a_pasted_vllm_command_line_measures_what_vllm_measures(
    vllm_server: VllmServer, tmp_path: Path
):
    if not CLI.exists():
        pytest.skip(f"no vllm CLI at {CLI}")
    line = LINE.format(url=vllm_server.url, tokenizer=MODEL_DIR, dir=tmp_path)
    args = shlex.split(line)
    screens = []
    for i in (1, 2):
        _run([str(CLI), "bench", "serve", *args, "--result-filename", f"vllm{i}.json"])
        ours = ["--result-filename", f"ours{i}.json", "--out", str(tmp_path / f"run{i}")]
        screens.append(_run([sys.executable, "-m", "prefillscope", "bench", *args, *ours]))
    vllm = [json.loads((tmp_path / f"vllm{i}.json").read_text()) for i in (1, 2)]
    ours = [json.loads((tmp_path / f"ours{i}.json").read_text()) for i in (1, 2)]
    assert set(ours[0]) == set(vllm[0]), set(ours[0]) ^ set(vllm[0])
    for doc in (*vllm, *ours):
        assert (doc["completed"], doc["failed"], doc["total_output_tokens"]) == (40, 0, 1280)
        assert doc["max_concurrency"] == 4 and doc["request_goodput"] is not None
        assert abs(doc["total_input_tokens"] - 40 * 256) <= 40  # vLLM re-tokenizes its text
    print(f"\n{'figure':18} {'vllm run 1':>11} {'vllm run 2':>11} {'ours 1':>9} {'ours 2':>9}")
    failures = []
    for key in SHOWN:
        v, o = [d[key] for d in vllm], [d[key] for d in ours]
        noise = 2 * max(abs(v[0] - v[1]), abs(o[0] - o[1]))
        allowed = max(noise, FLOOR_MS, FLOOR_SHARE * max(v))
        gap = abs(sum(o) / 2 - sum(v) / 2)
        print(f"{key:18} {v[0]:11.2f} {v[1]:11.2f} {o[0]:9.2f} {o[1]:9.2f}  gap {gap:.2f} "
              f"allowed {allowed:.2f}")  # fmt: skip
        if gap > allowed and key in COMPARED:
            failures.append(f"{key}: vLLM {v}, ours {o}, gap {gap:.2f} > {allowed:.2f} ms")
    assert not failures, failures
    # our screen leads with the TTFT vLLM reports under the cap, the intended-send one after
    rows = [r.split()[0:3] for r in screens[0].splitlines() if r.strip().startswith("TTFT (")]
    assert rows[0][1] in ("(from", "(sent,") and rows[0][2] in ("actual", "as")
    assert rows[1][1] in ("(from", "(intended)")
