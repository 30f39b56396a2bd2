"""What the GPU alone explains: the roofline decode step for the run's model and GPU.

H2 (host overhead) and H3 (KV bandwidth) both ask "how long *should* a decode step
take for this batch?" and answer it with the embedded engine's cost model
(``perfmodel.costmodel.CostModel``), evaluated for the model and GPU the user names
(``--model``, ``--gpu``, ``--tensor-parallel-size``) or, for a run against the embedded
engine, the configuration ``run.json`` records. Two adjustments make it a *GPU* model:

* host overheads (``host_overhead_step_s``, ``host_overhead_per_seq_s``) are dropped —
  they are exactly what H2 is looking for, so they cannot be part of the expectation;
* the embedded engine's ``time_scale`` is kept: it slows the modelled GPU down, so the
  step the client sees is the modelled step times the scale.

Steps are costed per distinct (batch size, context) pair, with contexts rounded to 2 %,
so a run of 10^6 gaps costs a few thousand model evaluations, not 10^6.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.config import EngineConfig, flag_error
from perfmodel.costmodel import CostModel
from perfmodel.models import resolve_gpu, resolve_model
from workloads.errors import InputError

#: Relative resolution of contexts when costing steps (log scale).
CONTEXT_RESOLUTION = 0.02
#: EngineConfig fields that are host-side overheads, not the GPU's work.
HOST_FIELDS = ("host_overhead_step_s", "host_overhead_per_seq_s")


@dataclass(frozen=True)
class Roofline:
    """The cost model of one model on one GPU, as a diagnosis uses it."""

    cost: CostModel
    time_scale: float
    source: str

    @property
    def label(self) -> str:
        scale = f", time_scale {self.time_scale:g}" if self.time_scale != 1 else ""
        return f"cost model: {self.cost.model.name} on {self.cost.gpu.name}{scale}"

    @property
    def kv_bytes_per_token(self) -> float:
        return float(self.cost.kv_bytes_per_token)

    @property
    def bytes_per_s(self) -> float:
        """HBM bytes per second a step achieves (bandwidth × efficiency), time scale included."""
        return self.cost.gpu.bandwidth * self.cost.config.bandwidth_efficiency / self.time_scale

    def decode_step_s(self, running: np.ndarray, context: np.ndarray) -> np.ndarray:
        """Seconds of a pure-decode step of ``running`` sequences at mean ``context``."""
        running = np.maximum(np.asarray(running, dtype=np.int64), 1)
        context = np.maximum(np.asarray(context, dtype=float), 0.0)
        grid = np.round(np.log1p(context) / CONTEXT_RESOLUTION)
        pairs, inverse = np.unique(np.stack([running, grid]), axis=1, return_inverse=True)
        times = np.array(
            [
                self.cost.decode_step_time(int(n), float(np.expm1(g * CONTEXT_RESOLUTION)))
                for n, g in pairs.T
            ]
        )
        return times[inverse.ravel()] * self.time_scale

    def kv_read_s(self, running: np.ndarray, context: np.ndarray) -> np.ndarray:
        """Seconds a decode step spends reading (and writing) the batch's KV cache."""
        return self.kv_bytes(running, context) / self.bytes_per_s

    def kv_bytes(self, running: np.ndarray, context: np.ndarray) -> np.ndarray:
        """KV bytes a decode step moves: running × (context + 1) × bytes per token."""
        running = np.asarray(running, dtype=float)
        return self.cost.kv_bytes_per_step(running, np.asarray(context, dtype=float))


def _engine_config(fields: dict[str, Any]) -> EngineConfig:
    known = {f.name for f in dataclasses.fields(EngineConfig)}
    return EngineConfig(**{k: v for k, v in fields.items() if k in known})


def resolve_roofline(
    engine: dict[str, Any] | None,
    *,
    model: str | None = None,
    gpu: str | None = None,
    tensor_parallel_size: int | None = None,
) -> tuple[Roofline | None, list[str]]:
    """The roofline for a run, and what is missing when there is none.

    ``engine`` is the embedded engine's configuration from ``run.json`` (None for another
    server); the flags override it. A bad ``--model``/``--gpu`` raises ``InputError``
    (``EngineConfig.validate``).
    """
    try:
        return _resolve(engine, model, gpu, tensor_parallel_size)
    except InputError as exc:  # named as diagnose's flags (``--model``, ``--gpu`` …)
        raise flag_error(exc, {}) from None


def _resolve(
    engine: dict[str, Any] | None,
    model: str | None,
    gpu: str | None,
    tensor_parallel_size: int | None,
) -> tuple[Roofline | None, list[str]]:
    if model is not None:
        resolve_model(model)  # a bad flag is an error even when the roofline cannot be built
    if gpu is not None:
        resolve_gpu(gpu)
    base = dict(engine or {})
    given = {"model": model, "gpu": gpu, "tensor_parallel_size": tensor_parallel_size}
    base.update({k: v for k, v in given.items() if v is not None})
    missing = [f"--{k}" for k in ("model", "gpu") if not base.get(k)]
    if missing:
        return None, [
            f"the model and GPU behind the server ({' and '.join(missing)}): "
            "without them no roofline step time can be computed"
        ]
    for name in HOST_FIELDS:
        base[name] = 0.0
    config = _engine_config(base)
    config.validate()
    source = "run.json (embedded engine config)" if engine else "--model/--gpu"
    if engine and any(v is not None for v in given.values()):
        source += " with --model/--gpu/--tensor-parallel-size"
    return Roofline(CostModel.from_config(config), config.time_scale, source), []
