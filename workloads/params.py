"""Workload parameters: typed dataclasses filled from flags, presets and spec files.

Each workload family declares its knobs once, as a frozen dataclass whose field types
say how a value is read (``Distribution`` fields take ``uniform:100-200``, ``Names``
fields take ``3`` or ``a,b,c``) and whose field metadata says what is allowed (a
length's floor, a string's choices). The same declaration then validates a CLI
override, a YAML value and a preset, lists the known keys when one is misspelt, and
prints the resolved values back for ``run.json``.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from typing import Any

from workloads.distributions import (
    Distribution,
    at_least,
    at_most,
    parse_distribution,
    whole_numbers,
)
from workloads.errors import InputError
from workloads.limits import MAX_NAMES, MAX_PLAN_REQUESTS, MAX_TOKENS, PLAN_REASON

#: The cap of a float knob that does not name its own: no share, exponent or multiplier
#: of a workload means anything beyond it (and a sample of it must fit an int64).
MAX_KNOB = 1e6

#: A list of names (tenants as ``cache_salt`` values, LoRA adapters). Given as a count
#: (``3`` → ``tenant-0 … tenant-2``), a comma-separated string or a list.
Names = tuple[str, ...]

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def dist(
    default: str | float,
    minimum: float = 0,
    doc: str = "",
    *,
    maximum: float = MAX_TOKENS,
    whole: bool = True,
) -> dict[str, Any]:
    """``field(**dist(…))``: a distribution (lengths in tokens, times in seconds) >= ``minimum``
    and <= ``maximum`` (default ``MAX_TOKENS``: a length; a time gives ``MAX_SECONDS``);
    ``whole``: of whole numbers (a length; a time passes ``whole=False``)."""
    parsed = at_most(parse_distribution(default, "default"), maximum, "default")
    return {
        "default": at_least(parsed, minimum, "default"),
        "metadata": {"min": minimum, "max": maximum, "doc": doc, "whole": whole},
    }


def number(
    default: float | int,
    minimum: float = 0,
    doc: str = "",
    *,
    above: bool = False,
    maximum: float | None = None,
) -> dict[str, Any]:
    """``field(**number(…))``: an int or float at least ``minimum`` (above it when ``above``)
    and at most ``maximum`` (default: ``MAX_PLAN_REQUESTS`` for a count, ``MAX_KNOB``)."""
    meta: dict[str, Any] = {"min": minimum, "above": above, "doc": doc}
    if maximum is not None:
        meta["max"] = maximum
    return {"default": default, "metadata": meta}


def names(prefix: str, doc: str = "") -> dict[str, Any]:
    """``field(**names(…))``: a ``Names`` list; a count ``n`` becomes ``{prefix}0 …``."""
    return {"default": (), "metadata": {"prefix": prefix, "doc": doc}}


def choice(default: str, choices: tuple[str, ...], doc: str = "") -> dict[str, Any]:
    """``field(**choice(…))``: one of ``choices``."""
    return {"default": default, "metadata": {"choices": choices, "doc": doc}}


def option(default: str | bool, doc: str = "") -> dict[str, Any]:
    """``field(**option(…))``: a free string or a boolean switch."""
    return {"default": default, "metadata": {"doc": doc}}


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise InputError(key, f"expected true or false, got {value!r}")


def _number(key: str, value: object, kind: type, meta: Mapping[str, Any]) -> float | int:
    if isinstance(value, bool):
        raise InputError(key, f"expected a number, got {value!r}")
    try:
        parsed = kind(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise InputError(
            key, f"expected {'a whole' if kind is int else 'a'} number, got {value!r}"
        ) from None
    if kind is int and isinstance(value, float) and value != parsed:
        raise InputError(key, f"expected a whole number, got {value!r}")
    minimum = meta.get("min", -math.inf)
    if parsed == math.inf and meta.get("inf"):
        return parsed
    if not math.isfinite(parsed) or parsed < minimum or (meta.get("above") and parsed == minimum):
        bound = f"> {minimum:g}" if meta.get("above") else f">= {minimum:g}"
        raise InputError(key, f"must be {bound}, got {value!r}")
    cap = meta.get("max", MAX_PLAN_REQUESTS if kind is int else MAX_KNOB)
    if parsed > cap:  # an int knob is a count: of requests, groups, turns
        why = meta.get("why") or (
            PLAN_REASON if kind is int and "max" not in meta else f"must be <= {cap:g}"
        )
        shown = (
            f"{parsed:,} is above the cap of {cap:,}"
            if kind is int
            else (f"{parsed:g} is above the cap of {cap:g}")
        )
        raise InputError(key, shown, why)
    return parsed


def _names(key: str, value: object, prefix: str) -> Names:
    if isinstance(value, bool):
        raise InputError(key, f"expected a count or a list of names, got {value!r}")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        count = int(value)
        if count < 0:
            raise InputError(key, f"count must be >= 0, got {count}")
        if count > MAX_NAMES:  # 10^30 built names until the machine gave out
            raise InputError(
                key, f"{count:,} is above the cap of {MAX_NAMES:,}", "each is a name in memory"
            )
        return tuple(f"{prefix}{i}" for i in range(count))
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise InputError(key, f"expected a count or a list of names, got {value!r}")
    out = tuple(str(v).strip() for v in items)
    if any(not v for v in out) or len(set(out)) != len(out):
        raise InputError(key, f"names must be non-empty and distinct, got {value!r}")
    return out


def convert(key: str, hint: object, value: object, meta: Mapping[str, Any]) -> object:
    """``value`` read as the field type ``hint`` and checked against ``meta``."""
    if hint is Distribution:
        capped = at_most(parse_distribution(value, key), meta.get("max", MAX_TOKENS), key)
        checked = at_least(capped, meta.get("min", 0), key)
        return whole_numbers(checked, key) if meta.get("whole", True) else checked
    if hint is bool:
        return _bool(key, value)
    if hint in (int, float):
        return _number(key, value, hint, meta)
    if hint == Names:
        return _names(key, value, meta.get("prefix", ""))
    if not isinstance(value, str):
        raise InputError(key, f"expected text, got {value!r}")
    choices = meta.get("choices")
    if choices and value not in choices:
        raise InputError(key, f"unknown value {value!r}", f"one of: {', '.join(choices)}")
    return value


def known_keys(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def make_params(cls: type, values: Mapping[str, object], where: str) -> Any:
    """An instance of the params dataclass ``cls`` from ``values`` (unknown keys refused)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in values.items():
        field = fields.get(key)
        if field is None:
            raise InputError(key, f"unknown key for {where}", f"known: {', '.join(fields)}")
        kwargs[key] = convert(key, hints[key], value, field.metadata)
    return cls(**kwargs)


def params_dict(params: Any) -> dict[str, object]:
    """The resolved parameters as plain JSON-able values (distributions as their strings)."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if isinstance(value, tuple):
            out[f.name] = list(value)
        elif isinstance(value, bool | int | float | str) or value is None:
            out[f.name] = value
        else:
            out[f.name] = str(value)
    return out
