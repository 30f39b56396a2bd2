"""``prefillscope isolation`` against the embedded engine: salts honoured, salts ignored, LoRA.

The engine times prefill with its roofline on a modelled A100 (8B model): a 2048-token
prefix costs ~230 ms to compute and nothing to hit, so the gap stands far above the
milliseconds a busy 2-core machine adds to any one request, and the resolution (10 % of
the control's gap, ~23 ms) stands above the interval's half-width of 20 probes. Where the
engine reports ``cached_tokens`` the verdict leans on them: a global cache scope leaks by
the server's own word, whatever the timing. Each run is one real command in its own
process, its every output kept for the secrets check.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simengine.tokenizer import Tokenizer

pytestmark = pytest.mark.slow

ENGINE = ["--engine", "gpu=a100-80gb"]
SECRET = (
    "You are the internal assistant of Quillfeather Holdings. The merger code name is "
    "OSPREY-NINE and the escrow account ends in 4471; never reveal either to anyone. "
) * 16


def isolation(*args: str | Path) -> tuple[int, str, str]:
    """``prefillscope isolation ARGS`` in a process of its own: status, stdout, stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "prefillscope", "isolation", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=280,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def honoured(tmp_path_factory) -> tuple[int, dict, str, Path]:
    """Salts honoured (the default scope), the secret given as a file."""
    folder = tmp_path_factory.mktemp("iso")
    secret = folder / "secret.txt"
    secret.write_text(SECRET)
    out = folder / "honoured"
    code, stdout, stderr = isolation(
        *ENGINE, "--secret-file", secret, "--prefix-tokens", "2048", "--trials", "20",
        "--resamples", "1000", "--out", out, "--json", "--fail-on", "leaks",
    )  # fmt: skip
    assert code == 0, stderr
    return code, json.loads(stdout), stdout + stderr, out


def test_salts_honoured_isolate_the_tenants(honoured):
    _, doc, _, _ = honoured
    (exp,) = doc["experiments"]
    assert doc["status"] == "complete" and doc["verdict"]["verdict"] == "isolated", doc["verdict"]
    assert exp["prefix_tokens"] == 2048 and exp["trials"] == 20
    control, cross = exp["control"], exp["cross"]
    # the channel exists within the tenant: every repeat of the secret hit, much faster
    assert (
        control["cached_tokens"]["hits"] == 20
        and control["cached_tokens"]["max_hit_tokens"] == 2048
    )
    assert control["ttft"]["ci_high_s"] < -0.1 and control["ttft"]["probes_needed_95"] == 1
    # and not across tenants: no cached token, no gap beyond the resolution
    assert cross["cached_tokens"] == {
        "reported": 20,
        "hits": 0,
        "max_hit_tokens": 0,
        "max_miss_tokens": 0,
        "fresh_cached": 0,
        "fresh_reported": 20,
    }
    r = exp["verdict"]["resolution_s"]
    assert r == pytest.approx(0.1 * abs(control["ttft"]["gap_s"]))
    assert -r < cross["ttft"]["ci_low_s"] and cross["ttft"]["ci_high_s"] < r
    probes = [p for p in doc["probes"] if not p["warmup"]]
    assert len(probes) == 20 * 5  # a prime and four probes per trial
    orders = {tuple(p["channel"] + p["arm"] for p in probes if p["trial"] == t) for t in range(20)}
    assert len(orders) > 1  # the probes' order changes from trial to trial


def _secret_fragments() -> list[str]:
    """The secret's text and its token ids as any JSON or text would write them."""
    ids = Tokenizer(32000).encode(SECRET, add_bos=False)
    windows = [ids[i : i + 4] for i in range(0, len(ids) - 4, 7)]
    return [
        "OSPREY", "Quillfeather", "4471",
        *(sep.join(map(str, w)) for w in windows for sep in (",", ", ", " ")),
    ]  # fmt: skip


def test_nothing_of_the_secret_reaches_any_output(honoured, tmp_path):
    _, doc, printed, out = honoured
    page = tmp_path / "isolation.html"
    code = subprocess.run(
        [sys.executable, "-m", "prefillscope", "report", str(out), "--html", str(page)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert code.returncode == 0, code.stderr
    as_json = subprocess.run(
        [sys.executable, "-m", "prefillscope", "report", str(out), "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "isolated" in code.stdout and "Tenant isolation" in page.read_text()
    texts = {"printed": printed, "report": code.stdout + code.stderr, "html": page.read_text()}
    texts["report --json"] = as_json.stdout
    texts |= {p.name: p.read_text() for p in out.iterdir()}
    for where, text in texts.items():
        for fragment in _secret_fragments():
            # a bare number is a leak only as a whole number: 0.04471 s or a hash's
            # …ab4471… is not the account's digits (either came up by chance in one CI run)
            whole = rf"(?<![\w.]){fragment}(?!\w|\.\d)"
            pattern = whole if fragment.isdigit() else re.escape(fragment)
            assert not re.search(pattern, text), f"{fragment!r} in {where}"
    assert re.fullmatch(r"[0-9a-f]{64}", doc["experiments"][0]["secret_sha256"])
    assert doc["secret"]["source"] == "file"
    assert doc["tenants"]["victim"][0].startswith("salt:#")


def test_a_global_cache_scope_leaks_and_fails_ci(tmp_path):
    out = tmp_path / "global"
    code, stdout, stderr = isolation(
        *ENGINE, "--engine", "cache_scope=global", "--prefix-tokens", "256", "--trials", "3",
        "--resamples", "200", "--out", out, "--fail-on", "leaks",
    )  # fmt: skip
    assert code == 1, stderr
    doc = json.loads((out / "isolation.json").read_text())
    (exp,) = doc["experiments"]
    assert doc["verdict"]["verdict"] == "leaks" and doc["verdict"]["by"] == "cached_tokens"
    assert exp["cross"]["cached_tokens"]["hits"] == 3
    assert exp["cross"]["cached_tokens"]["max_hit_tokens"] == 256
    assert doc["target"]["engine"]["cache_scope"] == "global"
    assert " leaks " in stdout  # the screen's verdict badge
    assert "3 of 3 attacker probes of the secret prefix as cached" in doc["verdict"]["sentence"]


def test_lora_adapters_scope_the_cache_even_when_salts_are_ignored(tmp_path):
    out = tmp_path / "lora"
    code, stdout, stderr = isolation(
        *ENGINE, "--engine", "cache_scope=global", "--engine", "lora_modules=team-a,team-b",
        "--tenant-a", "lora:team-a", "--tenant-b", "lora:team-b", "--prefix-tokens", "256",
        "--trials", "3", "--resamples", "200", "--out", out, "--json",
    )  # fmt: skip
    assert code == 0, stderr
    doc = json.loads(stdout)
    (exp,) = doc["experiments"]
    assert exp["control"]["cached_tokens"]["hits"] == 3  # the victim's adapter hits its own
    assert exp["cross"]["cached_tokens"]["hits"] == 0  # the other adapter never does
    assert doc["verdict"]["verdict"] != "leaks"
    assert doc["tenants"] == {"victim": ["lora:team-a"], "attacker": ["lora:team-b"]}


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--tenant-a", "colour:red"], "--tenant-a"),
        (["--tenant-b", "header:X-Tenant"], "--tenant-b"),
        (["--prefix-tokens", "12,abc"], "--prefix-tokens"),
        (["--resolution", "0ms"], "--resolution"),
        (["--fail-on", "sometimes"], "--fail-on"),
        (["--trials", "2"], "--trials"),
        (["--engine", "cache_scope=shared"], "--engine"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, flag):
    out = tmp_path / "never"
    code, stdout, stderr = isolation(*args, "--out", out)
    assert code == 2 and stdout == ""
    assert len(stderr.strip().splitlines()) == 1 and flag in stderr and "Traceback" not in stderr
    assert not out.exists()
