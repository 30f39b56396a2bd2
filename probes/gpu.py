"""GPU samples through NVML (nvidia-ml-py): utilisation, memory, SM clock, power per GPU.

Rows go to the run's ``gpu`` table on the run clock. A machine without an NVIDIA driver
is common (CPU servers, a laptop driving a remote endpoint): the probe then says
``unavailable`` with NVML's reason and writes no rows — a zero would read as an idle GPU.
A field one GPU does not support (power on some boards) is null in its row for the same
reason. NVML calls block, so they run in a worker thread, away from the event loop that
timestamps tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pynvml

from probes.sampling import PeriodicProbe, ProbeStatus
from runfmt.names import GPU_TABLE
from runfmt.rundir import RunDir
from runtime.clock import RunClock

GPU_COLUMNS = (
    "t_s",
    "gpu",
    "name",
    "utilisation_pct",
    "memory_used_bytes",
    "memory_total_bytes",
    "sm_clock_mhz",
    "power_w",
)


def _field(read: Callable[[], Any]) -> Any:
    """One NVML reading, or None when this GPU cannot report it."""
    try:
        return read()
    except pynvml.NVMLError:
        return None


class GpuSampler(PeriodicProbe):
    """Sample every GPU NVML sees; ``mode`` is ``auto`` (sample if possible) or ``off``."""

    def __init__(
        self,
        clock: RunClock,
        run: RunDir | None = None,
        *,
        interval_s: float = 0.5,
        mode: str = "auto",
    ) -> None:
        if mode not in ("auto", "off"):
            raise ValueError(f"gpu mode must be auto or off, got {mode!r}")
        super().__init__(ProbeStatus.for_run(GPU_TABLE, run), clock, interval_s)
        self.mode = mode
        self._table = run.table(GPU_TABLE) if run is not None else None
        self._handles: list[Any] = []

    def available(self) -> bool:
        """Initialise NVML and find the GPUs; False (status says why) when it cannot."""
        if self.mode == "off":
            self.status.off("--gpu-telemetry off")
            return False
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError as exc:
            self.status.unavailable(f"NVML: {exc}")
            return False
        if not self._handles:
            self.status.unavailable("NVML found no GPU")
            return False
        return True

    def read(self) -> list[dict[str, Any]]:
        """One row per GPU, stamped with the run clock."""
        t_s = self.clock.now()
        rows = []
        for index, handle in enumerate(self._handles):
            memory = _field(lambda h=handle: pynvml.nvmlDeviceGetMemoryInfo(h))
            power_mw = _field(lambda h=handle: pynvml.nvmlDeviceGetPowerUsage(h))
            utilisation = _field(lambda h=handle: pynvml.nvmlDeviceGetUtilizationRates(h))
            rows.append(
                {
                    "t_s": t_s,
                    "gpu": index,
                    "name": _field(lambda h=handle: pynvml.nvmlDeviceGetName(h)),
                    "utilisation_pct": utilisation.gpu if utilisation is not None else None,
                    "memory_used_bytes": memory.used if memory is not None else None,
                    "memory_total_bytes": memory.total if memory is not None else None,
                    "sm_clock_mhz": _field(
                        lambda h=handle: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
                    ),
                    "power_w": power_mw / 1000.0 if power_mw is not None else None,
                }
            )
        return rows

    async def tick(self) -> list[dict[str, Any]]:
        try:
            rows = await asyncio.to_thread(self.read)
        except pynvml.NVMLError as exc:
            self.status.fail(f"NVML: {exc}", self.clock.now())
            return []
        if self._table is not None:
            self._table.append_many(rows)
        self.status.succeeded()
        return rows

    async def aclose(self) -> None:
        if self._handles:
            self._handles = []
            _field(pynvml.nvmlShutdown)
