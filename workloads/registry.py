"""Every workload family and preset by name: what ``--workload`` can say.

The names are listed here and a family's module is imported when the family is asked
for: the CLI prints the names in ``--help`` on every start, and the families' builders
pull in numpy. ``tests/cli/test_cli_startup.py`` checks these names against the families.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workloads.family import Family

#: Family names, each the ``FAMILY`` of module ``workloads.<name, "-" written "_">``.
FAMILY_NAMES = (
    "shared-prefix",
    "multi-turn",
    "long-prompt",
    "interference",
    "trace",
    "random",
    "sharegpt",
    "jsonl",
)
#: Families kept together in one module (``FAMILY_BY_NAME``), by name.
_SHARED_MODULES = {"random": "datasets", "sharegpt": "datasets", "jsonl": "datasets"}
#: Dataset families whose workload name carries a file: ``sharegpt:FILE``, ``jsonl:FILE``.
FILE_DATASETS = ("sharegpt", "jsonl")
#: Families whose workload name carries a file: ``trace:FILE``, ``sharegpt:FILE`` …
FILE_FAMILIES = ("trace", *FILE_DATASETS)

#: Preset name → the family whose ``presets`` hold its values.
PRESET_FAMILIES = {
    "system-prompt": "shared-prefix",
    "few-shot": "shared-prefix",
    "doc-qa": "shared-prefix",
}


def family(name: str) -> Family:
    """The family called ``name`` (one of ``FAMILY_NAMES``), its module imported now."""
    if name in _SHARED_MODULES:
        module = importlib.import_module(f"workloads.{_SHARED_MODULES[name]}")
        return module.FAMILY_BY_NAME[name]
    return importlib.import_module(f"workloads.{name.replace('-', '_')}").FAMILY


def preset(name: str) -> tuple[Family, dict[str, object]]:
    """The family of preset ``name`` (a key of ``PRESET_FAMILIES``) and the values it sets."""
    owner = family(PRESET_FAMILIES[name])
    return owner, dict(owner.presets[name])


def known_workloads() -> str:
    """The names ``--workload`` accepts, for error messages and ``--help``."""
    names = [n for n in FAMILY_NAMES if n not in FILE_FAMILIES] + list(PRESET_FAMILIES)
    files = [f"{n}:FILE" for n in FILE_FAMILIES]
    return ", ".join([*names, *files, "or a .yaml/.toml spec file"])
