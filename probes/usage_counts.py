"""The requests whose server ``usage`` cannot be right (``usage_suspect``, set per row by
``loadgen.records.usage_suspect``), counted: ``summary.json`` ``usage_suspect``, and the
mask the prefix hit rates leave out (``probes.latency.prefix_hit_rates``).
"""

from __future__ import annotations

import numpy as np

from loadgen.records import suspect_kind
from runfmt.codec import frozen_map
from runfmt.columns import Table, present
from runfmt.summary_sections import UsageSuspect


def suspect_mask(requests: Table) -> np.ndarray:
    """True for the requests whose server usage is impossible (``usage_suspect`` set)."""
    return present(requests, "usage_suspect")


class SuspectCounts:
    """``usage_suspects`` gathered a part of the requests at a time (``add`` each part)."""

    def __init__(self) -> None:
        self.suspect, self.of = 0, 0
        self.kinds: dict[str, int] = {}

    def add(self, requests: Table) -> None:
        suspect = suspect_mask(requests)
        self.suspect += int(suspect.sum())
        self.of += len(requests)
        reasons = (
            np.asarray(requests["usage_suspect"], dtype=object)[suspect] if suspect.any() else []
        )
        for reason in reasons:
            for part in str(reason).split("; "):
                self.kinds[suspect_kind(part)] = self.kinds.get(suspect_kind(part), 0) + 1

    def section(self) -> UsageSuspect:
        """``summary.json``'s ``usage_suspect``."""
        return UsageSuspect(self.suspect, self.of, frozen_map(self.kinds))


def usage_suspects(requests: Table) -> UsageSuspect:
    """How many requests carry impossible usage, of how many, by kind of impossibility."""
    counts = SuspectCounts()
    counts.add(requests)
    return counts.section()
