"""The roofline a diagnosis compares with."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from diagnose.roofline import resolve_roofline
from perfmodel.config import EngineConfig
from perfmodel.costmodel import CostModel
from workloads.errors import InputError


def _engine(**changes) -> dict:
    return dataclasses.asdict(dataclasses.replace(EngineConfig(), **changes))


def test_the_embedded_config_without_its_host_overhead_and_with_its_time_scale():
    engine = _engine(
        gpu="l40s", host_overhead_step_s=0.01, host_overhead_per_seq_s=0.002, time_scale=2.0
    )
    roofline, missing = resolve_roofline(engine)
    assert roofline is not None and not missing
    bare = CostModel.from_config(EngineConfig(gpu="l40s"))
    running, context = np.array([1, 8, 64]), np.array([100.0, 2000.0, 4000.0])
    pairs = zip(running, context, strict=True)
    expected = [2.0 * bare.decode_step_time(int(n), c) for n, c in pairs]
    assert roofline.decode_step_s(running, context) == pytest.approx(expected, rel=0.01)
    kv = bare.kv_bytes_per_step(64, 4000.0)
    assert roofline.kv_bytes(np.array([64]), np.array([4000.0]))[0] == pytest.approx(kv)
    assert roofline.kv_read_s(np.array([64]), np.array([4000.0]))[0] == pytest.approx(
        2.0 * kv / (0.864e12 * 0.8)
    )
    assert "l40s" in roofline.label and "time_scale 2" in roofline.label


def test_flags_override_the_engine_and_name_what_is_missing():
    roofline, _ = resolve_roofline(_engine(), gpu="a100-80gb")
    assert roofline is not None and roofline.cost.gpu.name == "a100-80gb"
    assert "with --model/--gpu" in roofline.source
    none, missing = resolve_roofline(None, model="llama-3.1-8b")
    assert none is None and "--gpu" in missing[0]
    with pytest.raises(InputError) as err:
        resolve_roofline(None, model="llama-3.1-8b", gpu="tpu9")
    assert err.value.field == "--gpu"
