"""What a run's requests were, counted: by kind, by error class, by the server's message.

Over the requests given (``probes.latency.summarize`` gives the measured ones); a
request counts as failed when its status is not ``ok``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from loadgen.records import Status


def completed_mask(requests: pd.DataFrame) -> np.ndarray:
    """True for requests that finished successfully."""
    if "status" not in requests.columns:
        return np.zeros(len(requests), dtype=bool)
    return (requests["status"] == Status.OK).to_numpy()


def _failed(requests: pd.DataFrame) -> pd.DataFrame:
    return requests[~completed_mask(requests)]


def error_counts(requests: pd.DataFrame) -> dict[str, int]:
    """Failed requests by error class, most frequent first."""
    failed = _failed(requests)
    if failed.empty:
        return {}
    kinds = failed.get("error_kind", pd.Series(index=failed.index, dtype=object))
    counts = kinds.fillna("unknown").astype(str).value_counts()
    return {str(k): int(v) for k, v in counts.items()}


def kind_counts(requests: pd.DataFrame) -> dict[str, int]:
    """Requests of each kind (``long-prompt``, ``decode``, ``turn`` …) among those
    recorded, in order of first appearance: they sum to the requests counted, also when
    a run stopped before sending its whole plan (``run.json``'s ``plan.by_kind`` keeps
    what was planned)."""
    if "kind" not in requests.columns or requests.empty:
        return {}
    counts = requests["kind"].fillna("unknown").astype(str).value_counts(sort=False)
    return {str(k): int(v) for k, v in counts.items()}


#: How many distinct error messages ``summary.json`` keeps (most frequent first).
TOP_ERROR_MESSAGES = 5


def error_messages(requests: pd.DataFrame, top: int = TOP_ERROR_MESSAGES) -> list[dict[str, Any]]:
    """The most frequent error messages of failed requests — the server's own words —
    with their class and count, most frequent first."""
    failed = _failed(requests)
    if failed.empty:
        return []
    frame = pd.DataFrame(
        {
            "kind": failed.get("error_kind", pd.Series(index=failed.index, dtype=object)),
            "message": failed.get("error_message", pd.Series(index=failed.index, dtype=object)),
        }
    ).fillna({"kind": "unknown", "message": "(no message)"})
    counts = frame.astype(str).value_counts(sort=True).head(top)
    return [{"message": m, "kind": k, "count": int(n)} for (k, m), n in counts.items()]
