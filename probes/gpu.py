"""GPU samples through NVML (nvidia-ml-py): utilisation, memory, SM clock, power per GPU.

Rows go to the run's ``gpu`` table on the run clock. A machine without an NVIDIA driver
is common (CPU servers, a laptop driving a remote endpoint): the probe then says
``unavailable`` with NVML's reason and writes no rows — a zero would read as an idle GPU.
A field one GPU does not support (power on some boards) is null in its row for the same
reason. NVML calls block, so they run in a worker thread, away from the event loop that
timestamps tokens. ``pynvml`` is imported when a sampler first looks for GPUs: a run with
``--gpu-telemetry off`` (and its probe process) never loads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import ModuleType
from typing import Any

from probes.sampling import PeriodicProbe, ProbeStatus
from runfmt.names import GPU_TABLE
from runfmt.rundir import RunDir, RunWriteError
from runtime.clock import RunClock


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
        self._nvml: ModuleType | None = None

    def _field(self, read: Callable[[], Any]) -> Any:
        """One NVML reading, or None when this GPU cannot report it."""
        assert self._nvml is not None
        try:
            return read()
        except self._nvml.NVMLError:
            return None

    def available(self) -> bool:
        """Initialise NVML and find the GPUs; False (status says why) when it cannot."""
        if self.mode == "off":
            self.status.off("--gpu-telemetry off")
            return False
        import pynvml

        self._nvml = pynvml
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
        pynvml, field = self._nvml, self._field
        assert pynvml is not None
        t_s = self.clock.now()
        rows = []
        for index, handle in enumerate(self._handles):
            memory = field(lambda h=handle: pynvml.nvmlDeviceGetMemoryInfo(h))
            power_mw = field(lambda h=handle: pynvml.nvmlDeviceGetPowerUsage(h))
            utilisation = field(lambda h=handle: pynvml.nvmlDeviceGetUtilizationRates(h))
            rows.append(
                {
                    "t_s": t_s,
                    "gpu": index,
                    "name": field(lambda h=handle: pynvml.nvmlDeviceGetName(h)),
                    "utilisation_pct": utilisation.gpu if utilisation is not None else None,
                    "memory_used_bytes": memory.used if memory is not None else None,
                    "memory_total_bytes": memory.total if memory is not None else None,
                    "sm_clock_mhz": field(
                        lambda h=handle: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
                    ),
                    "power_w": power_mw / 1000.0 if power_mw is not None else None,
                }
            )
        return rows

    async def tick(self) -> list[dict[str, Any]]:
        assert self._nvml is not None
        try:
            rows = await asyncio.to_thread(self.read)
        except self._nvml.NVMLError as exc:
            self.status.fail(f"NVML: {exc}", self.clock.now())
            return []
        if self._table is not None:
            try:
                self._table.append_many(rows)
            except RunWriteError as exc:  # the disk full: the sample is lost, not the probe
                self.status.fail(exc.reason, self.clock.now())
                return []
        self.status.succeeded()
        return rows

    async def aclose(self) -> None:
        if self._handles and self._nvml is not None:
            self._handles = []
            self._field(self._nvml.nvmlShutdown)
