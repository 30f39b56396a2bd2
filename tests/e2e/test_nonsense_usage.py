"""A server that reports impossible ``usage`` (``tests/support/fault_server.py --fault
nonsense-usage``: every other request's final usage holds, in turn, more cached than
prompt tokens, a negative prompt count, 40 completion tokens more than were streamed).

``bench`` keeps every value as the server said it, flags the row (``usage_suspect``,
with the reason), counts them in ``summary.json`` with one warning line at the end, and
leaves them out of the prefix hit rates, which say why they are null. The embedded
engine's own usage is never flagged.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import fault_server
import pytest
from bench_support import bench, bench_cli, requests_table

REQUESTS = 12
BENCH = [
    "--backend", "vllm", "--model", fault_server.MODEL, "--vocab-size", "32000",
    "--no-server-metrics", "--gpu-telemetry", "off", "--cache-protocol", "warm",
    "--workload", "shared-prefix", "--set", "groups=1", "--set", "prefix_len=16",
    "--set", "suffix_len=8", "--set", "output_len=4", "--num-requests", str(REQUESTS),
    "--rate", "20",
]  # fmt: skip


def bench_against(fault: str, out: Path) -> subprocess.CompletedProcess[str]:
    """``bench`` (``BENCH``) into ``out`` against the fault server playing ``fault``,
    stopped after; the run completed."""
    proc, url = fault_server.start(fault)
    try:
        done = bench_cli("--endpoint", url, *BENCH, "--out", str(out))
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow
def test_impossible_usage_is_kept_flagged_counted_and_left_out_of_hit_rates(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    done = bench_against("nonsense-usage", out)
    warnings = [line for line in done.stderr.splitlines() if "impossible usage" in line]
    print(*warnings, sep="\n")
    assert len(warnings) == 1
    assert warnings[0].startswith(
        f"prefillscope: warning: 6 of {REQUESTS} completed requests carry impossible usage"
    )
    for kind in ("cached_tokens > prompt_tokens ×2", "negative prompt_tokens ×2"):
        assert kind in warnings[0]
    requests = requests_table(out)
    flagged = requests[requests["usage_suspect"].notna()]
    print(flagged[["id", "prompt_tokens", "cached_tokens", "output_tokens", "usage_suspect"]])
    assert len(flagged) == 6 and (requests["status"] == "ok").all()
    reasons = flagged["usage_suspect"].tolist()
    assert sum(r.startswith("cached_tokens > prompt_tokens (") for r in reasons) == 2
    assert reasons.count("negative prompt_tokens (-5)") == 2
    assert sum(r.startswith("completion_tokens != streamed tokens (44 vs 4 ") for r in reasons) == 2
    assert (flagged["prompt_tokens"] == -5).sum() == 2  # kept raw, as the server said
    assert (flagged["output_tokens"] == 44).sum() == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["usage_suspect"]["requests"] == 6
    assert summary["usage_suspect"]["of"] == REQUESTS
    prefix = summary["prefix"]
    assert prefix["usage_suspect_excluded"] == 6
    # the honest half reports no cached_tokens: null, and the reason names the left-out half
    assert prefix["observed_hit_rate"] is None
    assert "6 left out as usage_suspect" in prefix["observed_reason"]
    assert prefix["expected_hit_rate"] is not None  # over the six possible ones
    server_expected = summary["server"]["prefix"]["expected_hit_rate"]
    assert server_expected["value"] == pytest.approx(prefix["expected_hit_rate"], abs=0.2)


def test_the_embedded_engines_usage_is_never_suspect(tmp_path: Path) -> None:
    overrides = {"num_requests": 12, "rate": 40, "prefix_len": 64, "output_len": 16}
    outcome = bench("shared-prefix", tmp_path / "run", overrides=overrides)
    assert outcome.exit_code == 0 and outcome.usage_warning is None
    requests = requests_table(tmp_path / "run")
    assert requests["usage_suspect"].isna().all() and requests["cached_tokens"].notna().all()
    assert outcome.summary.to_json()["usage_suspect"] == {"requests": 0, "of": 12, "kinds": {}}
    assert "usage_suspect_excluded" not in outcome.summary.to_json()["prefix"]


@pytest.mark.slow
def test_a_server_reporting_whole_prompts_cached_is_flagged_not_believed(tmp_path: Path) -> None:
    """``--fault lying-cache``: every request well answered but its whole prompt reported
    cached, the first (nothing before it to share) too. No server caches the last prompt
    token (it is computed for the first output token's logits), so each row is flagged,
    the warning says so, and the observed hit rate is not the server's 100 %. Before, bench
    wrote ``observed_hit_rate`` 1.0 with no word."""
    out = tmp_path / "run"
    done = bench_against("lying-cache", out)
    (warning,) = [line for line in done.stderr.splitlines() if "impossible usage" in line]
    print(warning)
    assert f"{REQUESTS} of {REQUESTS} completed requests" in warning
    assert f"cached_tokens = prompt_tokens ×{REQUESTS}" in warning
    requests = requests_table(out)
    assert (requests["cached_tokens"] == requests["prompt_tokens"]).all()  # kept as said
    assert requests["usage_suspect"].str.contains("the last one is always computed").all()
    prefix = json.loads((out / "summary.json").read_text())["prefix"]
    assert prefix["observed_hit_rate"] is None
    assert f"{REQUESTS} left out as usage_suspect" in prefix["observed_reason"]
