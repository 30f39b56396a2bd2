"""The NVML GPU probe. This machine kind has no NVIDIA driver, so the no-GPU path runs
for real here; on a machine with a GPU the sampling path runs instead."""

from __future__ import annotations

import asyncio

import pynvml
import pytest

from probes.gpu import GpuSampler
from runfmt.codec import encode
from runfmt.rundir import RunDir
from runfmt.tables import GPU, RunTables
from runtime.clock import RunClock


def nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


HAS_GPU = nvml_works()


def sampled(tmp_path, seconds: float, **options) -> tuple[GpuSampler, RunDir]:
    """Run the sampler for a while inside a run directory, then close the run."""
    run = RunDir(tmp_path / "run", create=True)
    sampler = GpuSampler(RunClock(), run, **options)

    async def sample() -> None:
        async with sampler:
            await asyncio.sleep(seconds)

    asyncio.run(sample())
    run.close()
    return sampler, run


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU: the sampling test runs instead")
def test_no_gpu_is_unavailable_with_the_reason_never_zeros(tmp_path):
    sampler, run = sampled(tmp_path, 0.2, interval_s=0.05)
    assert sampler.status.state == "unavailable"
    assert sampler.status.reason.startswith("NVML: ")
    assert "Not Found" in sampler.status.reason or "Driver" in sampler.status.reason
    assert sampler.status.ok == 0
    assert RunTables(run).gpu.empty  # no rows at all, in particular no zero rows
    events = RunTables(run).probe_events
    assert events.to_dict("records") == [
        {"t_s": None, "probe": "gpu", "event": "unavailable", "reason": sampler.status.reason}
    ]


@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA driver")
def test_gpu_samples_per_device(tmp_path):
    sampler, run = sampled(tmp_path, 0.3, interval_s=0.05)
    assert sampler.status.state == "ok"
    table = RunTables(run).gpu
    assert list(table.columns) == list(GPU.columns)
    assert sampler.status.ok >= 3
    assert (table["memory_total_bytes"] > 0).all()
    assert (table["memory_used_bytes"] <= table["memory_total_bytes"]).all()
    assert table["utilisation_pct"].between(0, 100).all()


def test_gpu_off_is_not_attempted(tmp_path):
    sampler, run = sampled(tmp_path, 0.05, mode="off")
    assert encode(sampler.status.recorded()) == {
        "state": "off",
        "reason": "--gpu-telemetry off",
        "ok": 0,
        "failed": 0,
    }
    assert RunTables(run).gpu.empty
