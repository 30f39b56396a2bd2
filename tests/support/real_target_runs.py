"""What the tests against real targets (``real_vllm``, ``real_sglang``) run the same way:
``prefillscope probe URL --json`` as a process, and an isolation experiment of two
tenants at one prefix length."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from session.isolation import IsolationOptions, run_isolation

PROBE = [sys.executable, "-c", "from prefillscope.cli import main; main()", "probe"]


def probe(url: str) -> dict[str, Any]:
    """``prefillscope probe URL --json`` as a separate process."""
    done = subprocess.run(
        [*PROBE, url, "--json"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def isolation(
    url: str, out: Path, tenants: tuple[str, str], prefix: int, trials: int
) -> dict[str, Any]:
    """``isolation.json`` of tenant ``tenants[1]`` probing ``tenants[0]``'s prefix."""
    options = IsolationOptions(
        endpoint=url, tenant_a=[tenants[0]], tenant_b=[tenants[1]], prefix_tokens=(prefix,),
        trials=trials, resamples=500, out=out,
    )  # fmt: skip
    outcome = asyncio.run(run_isolation(options, progress=print))
    assert outcome.status == "complete"
    return outcome.document
