"""What a run's requests were, counted: by kind, by error class, by the server's message.

Over the requests given (``probes.latency.summarize_frames`` gives the measured ones); a
request counts as failed when its status is not ``ok``.
"""

from __future__ import annotations

from typing import Any

from runfmt.columns import Table, counted, texts
from runfmt.tables import completed_mask


def _failed(requests: Table) -> Table:
    return requests[~completed_mask(requests)]


def error_counts(requests: Table) -> dict[str, int]:
    """Failed requests by error class, most frequent first (ties in order of first
    appearance)."""
    failed = _failed(requests)
    return counted(texts(failed, "error_kind", "unknown"))


def kind_counts(requests: Table) -> dict[str, int]:
    """Requests of each kind (``long-prompt``, ``decode``, ``turn`` …) among those
    recorded, in order of first appearance: they sum to the requests counted, also when
    a run stopped before sending its whole plan (``run.json``'s ``plan.by_kind`` keeps
    what was planned)."""
    if "kind" not in requests or requests.empty:
        return {}
    return counted(texts(requests, "kind", "unknown"), by_count=False)


#: How many distinct error messages ``summary.json`` keeps (most frequent first).
TOP_ERROR_MESSAGES = 5


def error_messages(requests: Table, top: int = TOP_ERROR_MESSAGES) -> list[dict[str, Any]]:
    """The most frequent error messages of failed requests — the server's own words —
    with their class and count, most frequent first."""
    failed = _failed(requests)
    pairs = zip(
        texts(failed, "error_kind", "unknown"),
        texts(failed, "error_message", "(no message)"),
        strict=True,
    )
    counts = list(counted(list(pairs)).items())[:top]
    return [{"message": m, "kind": k, "count": n} for (k, m), n in counts]
