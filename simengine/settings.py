"""The embedded engine a run starts: its configuration and the server's stream interval."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from perfmodel.config import EngineConfig


@dataclass(frozen=True)
class EngineSettings:
    """What ``--engine`` asked for: the engine's config and the server's stream interval."""

    config: EngineConfig
    stream_interval: int = 1

    @classmethod
    def default(cls) -> EngineSettings:
        return cls(EngineConfig())

    def describe(self) -> dict[str, Any]:
        """For ``run.json``: every config field, and the stream interval."""
        return {**dataclasses.asdict(self.config), "stream_interval": self.stream_interval}
