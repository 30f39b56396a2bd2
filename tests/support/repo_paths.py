"""Where the tests find the repository's own files, wherever a test module sits."""

from __future__ import annotations

from pathlib import Path

#: The repository root.
ROOT = Path(__file__).resolve().parents[2]
#: Real /metrics expositions, SSE streams, error bodies, traces and the golden run.
FIXTURES = ROOT / "tests" / "fixtures"
#: The scripts that install and start real servers (``targets/vllm-cpu.sh``).
TARGETS = ROOT / "targets"
#: The test helpers' folder (this one), for scripts the tests start as processes.
SUPPORT = Path(__file__).resolve().parent
