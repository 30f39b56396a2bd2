"""What a run's requests were, counted: by kind, by error class, by the server's message.

Over the requests given (``probes.latency.summarize_frames`` gives the measured ones); a
request counts as failed when its status is not ``ok``.
"""

from __future__ import annotations

from collections import Counter

from runfmt.columns import Table, texts
from runfmt.summary_sections import ErrorMessage
from runfmt.tables import completed_mask


def _failed(requests: Table) -> Table:
    return requests[~completed_mask(requests)]


class RequestCounts:
    """The counts below, gathered a part of the requests at a time (``add`` each part in
    order): counting is the same over the parts as over the whole table, first
    appearances and ties included."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.has_kind = False
        self.errors: Counter[str] = Counter()
        self.messages: Counter[tuple[str, str]] = Counter()

    @classmethod
    def of(cls, requests: Table) -> RequestCounts:
        counts = cls()
        counts.add(requests)
        return counts

    def add(self, requests: Table) -> None:
        if "kind" in requests and not requests.empty:
            self.has_kind = True
            self.kinds.update(texts(requests, "kind", "unknown"))
        failed = _failed(requests)
        kinds = texts(failed, "error_kind", "unknown")
        self.errors.update(kinds)
        messages = texts(failed, "error_message", "(no message)")
        self.messages.update(zip(kinds, messages, strict=True))

    def by_kind(self) -> dict[str, int]:
        return dict(self.kinds) if self.has_kind else {}

    def by_error(self) -> dict[str, int]:
        return dict(self.errors.most_common())

    def top_messages(self, top: int) -> tuple[ErrorMessage, ...]:
        counts = self.messages.most_common()[:top]
        return tuple(ErrorMessage(m, k, n) for (k, m), n in counts)


def error_counts(requests: Table) -> dict[str, int]:
    """Failed requests by error class, most frequent first (ties in order of first
    appearance)."""
    return RequestCounts.of(requests).by_error()


def kind_counts(requests: Table) -> dict[str, int]:
    """Requests of each kind (``long-prompt``, ``decode``, ``turn`` …) among those
    recorded, in order of first appearance: they sum to the requests counted, also when
    a run stopped before sending its whole plan (``run.json``'s ``plan.by_kind`` keeps
    what was planned)."""
    return RequestCounts.of(requests).by_kind()


#: How many distinct error messages ``summary.json`` keeps (most frequent first).
TOP_ERROR_MESSAGES = 5


def error_messages(requests: Table, top: int = TOP_ERROR_MESSAGES) -> tuple[ErrorMessage, ...]:
    """The most frequent error messages of failed requests — the server's own words —
    with their class and count, most frequent first."""
    return RequestCounts.of(requests).top_messages(top)
