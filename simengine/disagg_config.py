"""What a disaggregated (prefill/decode) deployment is made of, without the engine.

Kept free of numpy and the engine so the command line can parse ``--disaggregate`` and
the ``--kv-*`` flags at startup.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from simengine.kv_link import LinkSpec
from workloads.errors import InputError

TRANSFER_MODES = ("after-prefill", "overlap")


#: Workers of one role (prefill or decode) in a P:D split: each is an engine in memory.
MAX_ROLE_WORKERS = 1024


def parse_ratio(text: str, field_name: str = "--disaggregate") -> tuple[int, int]:
    """``"P:D"`` as two positive worker counts."""
    p, sep, d = text.strip().partition(":")
    try:
        ratio = (int(p), int(d)) if sep else None
    except ValueError:
        ratio = None
    if ratio is None or min(ratio) < 1:
        raise InputError(field_name, f"{text!r} is not P:D", "e.g. 1:1 or 2:1 (positive counts)")
    if max(ratio) > MAX_ROLE_WORKERS:  # 1:10^30 built decode workers until killed
        raise InputError(
            field_name,
            f"{text!r} is above the cap of {MAX_ROLE_WORKERS:,} workers of a role",
            "each worker is an engine in memory",
        )
    return ratio


@dataclass(frozen=True)
class DisaggConfig:
    """How many workers of each role, the link between them and how KV is sent."""

    prefill_workers: int = 1
    decode_workers: int = 1
    link: LinkSpec = field(default_factory=LinkSpec)
    transfer: str = "after-prefill"

    def validate(self) -> None:
        if self.prefill_workers < 1 or self.decode_workers < 1:
            raise InputError("--disaggregate", "needs at least one worker of each role")
        if self.transfer not in TRANSFER_MODES:
            raise InputError(
                "--kv-transfer", f"unknown mode {self.transfer!r}", "after-prefill|overlap"
            )
        self.link.validate()

    @property
    def label(self) -> str:
        return f"{self.prefill_workers}:{self.decode_workers}"

    def describe(self) -> dict[str, Any]:
        """For ``run.json``: every field, and the ``P:D`` ratio."""
        return {**dataclasses.asdict(self), "ratio": self.label}
