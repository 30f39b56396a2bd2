"""``prefillscope.kv_link_flags``: the ``--disaggregate``/``--kv-*`` values as one checked
P/D configuration, every bad value named by its flag."""

from __future__ import annotations

import pytest

from prefillscope.kv_link_flags import disagg_config
from workloads.errors import InputError

GOOD = {"ratio": "2:1", "gbps": 100.0, "latency_us": 5.0, "overhead_us": 20.0,
        "efficiency": 0.8, "sharing": "fair", "transfer": "overlap"}  # fmt: skip


def test_the_flags_become_a_configuration_in_seconds():
    config = disagg_config(**GOOD)
    assert (config.prefill_workers, config.decode_workers, config.transfer) == (2, 1, "overlap")
    assert config.link.latency_s == pytest.approx(5e-6)
    assert config.link.overhead_s == pytest.approx(20e-6)
    assert config.link.bytes_per_s == pytest.approx(100e9 / 8 * 0.8)


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        ({"ratio": "2"}, "--disaggregate"),
        ({"ratio": "0:1"}, "--disaggregate"),
        ({"latency_us": -1.0}, "--kv-link-latency-us"),
        ({"overhead_us": -1.0}, "--kv-transfer-overhead-us"),
        ({"gbps": 0.0}, "--kv-link-gbps"),
        ({"efficiency": 1.5}, "--kv-link-efficiency"),
        ({"sharing": "random"}, "--kv-link-sharing"),
        ({"transfer": "early"}, "--kv-transfer"),
    ],
)
def test_a_bad_value_is_refused_naming_its_flag(change, flag):
    with pytest.raises(InputError) as err:
        disagg_config(**{**GOOD, **change})
    assert err.value.field == flag
