"""``simengine.settings``: what ``run.json`` records of the embedded engine a run started."""

from __future__ import annotations

from perfmodel.config import EngineConfig
from simengine.disagg_config import DisaggConfig
from simengine.settings import EngineSettings


def test_describe_has_every_config_field_and_the_stream_interval():
    config = EngineConfig(max_num_batched_tokens=1024)
    described = EngineSettings(config, stream_interval=4).describe()
    assert described["max_num_batched_tokens"] == 1024
    assert described["stream_interval"] == 4
    assert "disaggregate" not in described
    assert set(EngineSettings.default().describe()) == set(described)


def test_a_disaggregated_engine_says_its_workers_and_ratio():
    described = EngineSettings(EngineConfig(), disagg=DisaggConfig(2, 3)).describe()
    part = described["disaggregate"]
    assert (part["prefill_workers"], part["decode_workers"], part["ratio"]) == (2, 3, "2:3")
