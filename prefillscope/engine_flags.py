"""``bench --engine KEY=VALUE``: the embedded engine's configuration from the command line.

Every ``EngineConfig`` field can be set (``max_num_batched_tokens=4096``, ``gpu=l40s``,
``num_gpu_blocks=2000``, ``fixed_step_s=0.004``, ``host_overhead_per_seq_s=0.0002`` …),
plus server options: ``stream_interval`` (tokens per streamed event after the first) and
``disaggregate=P:D`` (P prefill and D decode workers, as ``serve --disaggregate``) with its
link, ``kv_link_gbps`` (default 100) and ``kv_transfer`` (``after-prefill`` or ``overlap``).
Values are converted by the field's type, so a typo or a wrong type is one line naming
the key — and the configuration is validated as a whole before any engine starts.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from typing import Any

from perfmodel.config import EngineConfig
from simengine.disagg_config import DisaggConfig
from simengine.settings import EngineSettings
from workloads.errors import InputError

FLAG = "--engine"
#: Server options accepted next to the ``EngineConfig`` fields.
SERVER_KEYS = ("stream_interval", "disaggregate", "kv_link_gbps", "kv_transfer")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_NONE = ("none", "null", "auto")


def _field_types() -> dict[str, Any]:
    hints = typing.get_type_hints(EngineConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(EngineConfig)}


def known_keys() -> str:
    return ", ".join([*_field_types(), *SERVER_KEYS])


def _convert(key: str, text: str, kind: Any) -> Any:
    """``text`` as a value of ``kind`` (``int``, ``float``, ``bool``, ``str``, ``X | None``)."""
    raw = text.strip()
    args = typing.get_args(kind) if isinstance(kind, types.UnionType) else ()
    if type(None) in args:
        if raw.lower() in _NONE:
            return None
        kind = next(a for a in args if a is not type(None))
    if kind is bool:
        if raw.lower() in _TRUE + _FALSE:
            return raw.lower() in _TRUE
        raise InputError(FLAG, f"{key}={text!r} is not true or false", f"e.g. {key}=false")
    if kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise InputError(FLAG, f"{key}={text!r} is not {what}") from None
    return raw


def _split(item: str) -> tuple[str, str, str]:
    """``KEY=VALUE`` as (key in underscores, ``=`` or "", value)."""
    key, sep, text = item.partition("=")
    return key.strip().replace("-", "_"), sep, text


def given_keys(items: Iterable[str]) -> set[str]:
    """The ``EngineConfig`` fields that ``items`` set (``simulate --calibrate``: what the
    user gave, which wins over what the run recorded)."""
    kinds = _field_types()
    return {key for key, _, _ in map(_split, items) if key in kinds}


def parse_engine_flags(items: Iterable[str]) -> EngineSettings:
    """The engine settings of repeated ``KEY=VALUE`` items, validated."""
    kinds = _field_types()
    values: dict[str, Any] = {}
    stream_interval = 1
    server: dict[str, str] = {}
    for item in items:
        key, sep, text = _split(item)
        if not sep or not key:
            raise InputError(FLAG, f"expected KEY=VALUE, got {item!r}", "e.g. --engine gpu=l40s")
        if key == "stream_interval":
            stream_interval = _convert(key, text, int)
            if stream_interval < 1:
                raise InputError(FLAG, f"stream_interval must be >= 1, got {stream_interval}")
        elif key in SERVER_KEYS:
            server[key] = text.strip()
        elif key in kinds:
            values[key] = _convert(key, text, kinds[key])
        else:
            raise InputError(FLAG, f"unknown engine setting {key!r}", f"known: {known_keys()}")
    config = EngineConfig(**values)
    try:
        config.validate()
    except InputError as exc:
        fix = f" ({exc.fix})" if exc.fix else ""
        raise InputError(FLAG, f"{exc.field}: {exc.problem}{fix}") from None
    return EngineSettings(config, stream_interval, _disagg(server))


def _disagg(server: dict[str, str]) -> DisaggConfig | None:
    """``disaggregate=P:D`` and its link keys, validated as ``serve``'s flags are."""
    from prefillscope.kv_link_flags import disagg_config

    if "disaggregate" not in server:
        if server:
            raise InputError(FLAG, f"{', '.join(server)} needs disaggregate=P:D")
        return None
    gbps = _convert("kv_link_gbps", server.get("kv_link_gbps", "100"), float)
    transfer = server.get("kv_transfer", "after-prefill")
    try:
        return disagg_config(server["disaggregate"], gbps, 0.0, 0.0, 1.0, "fair", transfer)
    except InputError as exc:
        key = exc.field.lstrip("-").replace("-", "_")
        fix = f" ({exc.fix})" if exc.fix else ""
        raise InputError(FLAG, f"{key}: {exc.problem}{fix}") from None
