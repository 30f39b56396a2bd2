"""The KV-link flags ``serve --disaggregate`` and ``simulate`` share, defined once.

Each is a typer-annotated type; :func:`disagg_config` turns their values (and a ``P:D``
ratio) into a validated :class:`~simengine.disagg_config.DisaggConfig`. Their defaults
(``DEFAULT_*``) are the link's and the configuration's own; their bounds are
the link's own (``simengine.kv_link.LINK_BOUNDS``), defined once for every command and
for the session. Importing this module pulls in neither numpy nor the engine.
"""

from __future__ import annotations

from typing import Annotated

import typer

from simengine.disagg_config import DisaggConfig, parse_ratio
from simengine.kv_link import LinkSpec

_LINK, _DISAGG = LinkSpec(), DisaggConfig()
#: The flags' defaults: the link's own (``LinkSpec``, in the flags' units) and the
#: transfer mode's (``DisaggConfig``).
DEFAULT_GBPS = _LINK.gbps
DEFAULT_LATENCY_US = _LINK.latency_s * 1e6
DEFAULT_OVERHEAD_US = _LINK.overhead_s * 1e6
DEFAULT_EFFICIENCY = _LINK.efficiency
DEFAULT_SHARING = _LINK.sharing
DEFAULT_TRANSFER = _DISAGG.transfer

KvLinkGbps = Annotated[float, typer.Option(help="P→D link speed, Gb/s.")]
KvLinkLatencyUs = Annotated[float, typer.Option(help="Fixed latency per transfer (µs).")]
KvTransferOverheadUs = Annotated[
    float, typer.Option(help="Setup cost per transfer (registration, posting), µs.")
]
KvLinkEfficiency = Annotated[
    float, typer.Option(help="Protocol efficiency: the share of the line rate KV gets.")
]
KvLinkSharing = Annotated[
    str, typer.Option(help="fair: concurrent transfers share the link; fifo: queue.")
]
KvTransfer = Annotated[
    str, typer.Option(help="after-prefill: whole cache at the end; overlap: per chunk.")
]


def disagg_config(
    ratio: str,
    gbps: float,
    latency_us: float,
    overhead_us: float,
    efficiency: float,
    sharing: str,
    transfer: str,
) -> DisaggConfig:
    """The validated P/D configuration of the ``--disaggregate``/``--kv-*`` flags."""
    p, d = parse_ratio(ratio)
    link = LinkSpec.from_flags(gbps, latency_us, overhead_us, efficiency, sharing)
    config = DisaggConfig(p, d, link, transfer)
    config.validate()
    return config
