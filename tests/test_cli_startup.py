"""The CLI starts without the heavy libraries: each command imports what it uses when run.

``--help`` and ``calc`` must answer at once, so building the command line (every
command's options, help and defaults) may not import numpy, pandas, scipy or aiohttp.
These are checked in a fresh interpreter, by what got imported rather than by a clock.
"""

from __future__ import annotations

from workloads import registry

HEAVY = ("numpy", "pandas", "scipy", "aiohttp")


def test_workload_names_match_the_families_without_importing_them() -> None:
    """``registry`` lists names only; each must be the family (or preset) it says."""
    for name in registry.FAMILY_NAMES:
        assert registry.family(name).name == name
    presets = {
        preset: name for name in registry.FAMILY_NAMES for preset in registry.family(name).presets
    }
    assert presets == registry.PRESET_FAMILIES
