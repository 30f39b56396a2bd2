"""The embedded engine a run starts: its configuration and the server's stream interval."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from perfmodel.config import EngineConfig
from simengine.disagg_config import DisaggConfig


@dataclass(frozen=True)
class EngineSettings:
    """What ``--engine`` asked for: the engine's config and the server's stream interval."""

    config: EngineConfig
    stream_interval: int = 1
    #: Prefill/decode workers and their KV link (``--engine disaggregate=P:D``); None: one.
    disagg: DisaggConfig | None = None

    @classmethod
    def default(cls) -> EngineSettings:
        return cls(EngineConfig())

    def describe(self) -> dict[str, Any]:
        """For ``run.json``: every config field, and the stream interval."""
        described = {**dataclasses.asdict(self.config), "stream_interval": self.stream_interval}
        if self.disagg is not None:
            described["disaggregate"] = self.disagg.describe()
        return described
