"""The requests whose server ``usage`` cannot be right (``usage_suspect``, set per row by
``loadgen.records.usage_suspect``), counted: ``summary.json`` ``usage_suspect``, and the
mask the prefix hit rates leave out (``probes.latency.prefix_hit_rates``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from loadgen.records import suspect_kind


def suspect_mask(requests: pd.DataFrame) -> np.ndarray:
    """True for the requests whose server usage is impossible (``usage_suspect`` set)."""
    if "usage_suspect" not in requests.columns:
        return np.zeros(len(requests), dtype=bool)
    return requests["usage_suspect"].notna().to_numpy(dtype=bool)


def usage_suspects(requests: pd.DataFrame) -> dict[str, Any]:
    """How many requests carry impossible usage, of how many, by kind of impossibility."""
    suspect = suspect_mask(requests)
    kinds: dict[str, int] = {}
    for reason in requests["usage_suspect"][suspect] if suspect.any() else []:
        for part in str(reason).split("; "):
            kinds[suspect_kind(part)] = kinds.get(suspect_kind(part), 0) + 1
    return {"requests": int(suspect.sum()), "of": len(requests), "kinds": kinds}
