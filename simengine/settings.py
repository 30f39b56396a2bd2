"""The embedded engine a run starts: its configuration and the server's stream interval."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from perfmodel.config import EngineConfig
from simengine.disagg_config import DisaggConfig
from workloads.cache_model import parse_cache_model
from workloads.errors import InputError


def check_disagg_cache(config: EngineConfig, disaggregated: bool) -> None:
    """Disaggregated workers hand KV over by block hash: they need the block cache."""
    if disaggregated and parse_cache_model(config.cache_model).kind != "blocks":
        raise InputError(
            "--cache-model",
            f"{config.cache_model} cannot be disaggregated (workers share KV by block hash)",
            "use --cache-model blocks with --disaggregate",
        )


@dataclass(frozen=True)
class EngineSettings:
    """What ``--engine`` asked for: the engine's config and the server's stream interval."""

    config: EngineConfig
    stream_interval: int = 1
    #: Prefill/decode workers and their KV link (``--engine disaggregate=P:D``); None: one.
    disagg: DisaggConfig | None = None

    def __post_init__(self) -> None:
        check_disagg_cache(self.config, self.disagg is not None)

    @classmethod
    def default(cls) -> EngineSettings:
        return cls(EngineConfig())

    def describe(self) -> dict[str, Any]:
        """For ``run.json``: every config field, and the stream interval."""
        described = {**dataclasses.asdict(self.config), "stream_interval": self.stream_interval}
        if self.disagg is not None:
            described["disaggregate"] = self.disagg.describe()
        return described
