"""Every workload family and preset by name: what ``--workload`` can say."""

from __future__ import annotations

from workloads import interference, long_prompt, multi_turn, shared_prefix, trace
from workloads.family import Family

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        shared_prefix.FAMILY,
        multi_turn.FAMILY,
        long_prompt.FAMILY,
        interference.FAMILY,
        trace.FAMILY,
    )
}

#: Preset name → (its family, the values it sets).
PRESETS: dict[str, tuple[Family, dict[str, object]]] = {
    name: (family, dict(values))
    for family in FAMILIES.values()
    for name, values in family.presets.items()
}


def known_workloads() -> str:
    """The names ``--workload`` accepts, for error messages and ``--help``."""
    names = [n for n in FAMILIES if n != "trace"] + list(PRESETS)
    return ", ".join([*names, "trace:FILE", "or a .yaml/.toml spec file"])
