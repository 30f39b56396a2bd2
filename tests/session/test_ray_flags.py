"""``session.ray_placement.check_flags``: ``--ray``/``--ray-placement`` checked before
anything starts (the cluster checks need Ray and are in ``e2e/test_bench_ray.py``)."""

from __future__ import annotations

import importlib.util

import pytest

from session.ray_placement import PLACEMENTS, check_flags
from workloads.errors import InputError

HAS_RAY = importlib.util.find_spec("ray") is not None


def test_without_ray_nothing_is_checked_and_a_placement_alone_is_refused():
    check_flags(None, None)
    with pytest.raises(InputError) as err:
        check_flags(None, "node")
    assert err.value.field == "--ray-placement" and "add --ray auto" in err.value.fix


@pytest.mark.skipif(HAS_RAY, reason="ray is installed here")
def test_ray_without_the_package_says_how_to_get_it():
    with pytest.raises(InputError) as err:
        check_flags("auto", "cpu")
    assert err.value.field == "--ray" and "prefillscope[ray]" in err.value.fix


@pytest.mark.skipif(not HAS_RAY, reason="needs the ray package")
def test_an_unknown_placement_is_refused_listing_the_known_ones():
    with pytest.raises(InputError) as err:
        check_flags("auto", "gpu")
    assert err.value.fix == f"use {' or '.join(PLACEMENTS)}"
