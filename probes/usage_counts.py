"""The requests whose server ``usage`` cannot be right (``usage_suspect``, set per row by
``loadgen.records.usage_suspect``), counted: ``summary.json`` ``usage_suspect``, and the
mask the prefix hit rates leave out (``probes.latency.prefix_hit_rates``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.records import suspect_kind
from runfmt.columns import Table, present


def suspect_mask(requests: Table) -> np.ndarray:
    """True for the requests whose server usage is impossible (``usage_suspect`` set)."""
    return present(requests, "usage_suspect")


def usage_suspects(requests: Table) -> dict[str, Any]:
    """How many requests carry impossible usage, of how many, by kind of impossibility."""
    suspect = suspect_mask(requests)
    kinds: dict[str, int] = {}
    reasons = np.asarray(requests["usage_suspect"], dtype=object)[suspect] if suspect.any() else []
    for reason in reasons:
        for part in str(reason).split("; "):
            kinds[suspect_kind(part)] = kinds.get(suspect_kind(part), 0) + 1
    return {"requests": int(suspect.sum()), "of": len(requests), "kinds": kinds}
