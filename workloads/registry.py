"""Every workload family and preset by name: what ``--workload`` can say.

The names are listed here and a family's module is imported when the family is asked
for: the CLI prints the names in ``--help`` on every start, and the families' builders
pull in numpy. ``tests/test_cli_startup.py`` checks these names against the families.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workloads.family import Family

#: Family names, each the ``FAMILY`` of module ``workloads.<name, "-" written "_">``.
FAMILY_NAMES = ("shared-prefix", "multi-turn", "long-prompt", "interference", "trace")

#: Preset name → the family whose ``presets`` hold its values.
PRESET_FAMILIES = {
    "system-prompt": "shared-prefix",
    "few-shot": "shared-prefix",
    "doc-qa": "shared-prefix",
}


def family(name: str) -> Family:
    """The family called ``name`` (one of ``FAMILY_NAMES``), its module imported now."""
    return importlib.import_module(f"workloads.{name.replace('-', '_')}").FAMILY


def preset(name: str) -> tuple[Family, dict[str, object]]:
    """The family of preset ``name`` (a key of ``PRESET_FAMILIES``) and the values it sets."""
    owner = family(PRESET_FAMILIES[name])
    return owner, dict(owner.presets[name])


def known_workloads() -> str:
    """The names ``--workload`` accepts, for error messages and ``--help``."""
    names = [n for n in FAMILY_NAMES if n != "trace"] + list(PRESET_FAMILIES)
    return ", ".join([*names, "trace:FILE", "or a .yaml/.toml spec file"])
