"""Which engine a calibrated run was measured on: its GPU, model and chunk budget.

A fit is only as good as the device and model it is fitted on: the same gaps read as
an H100 at budget 2048 or as an A100 at 12288 give other efficiencies, and a replay at
the wrong budget predicts other tails. So ``simulate --calibrate RUN`` takes the three
facts that decide the cost model's shape from the run itself, and never from defaults:

* the **embedded engine's** run records its whole configuration (``run.json``'s
  ``target.engine``): every ``EngineConfig`` field is taken from there;
* a **real server's** run records what detection read: the served model's name (taken
  when it is a preset or a folder with a ``config.json``), its vocabulary, the prefix
  cache's block size and pool (the oracle's geometry, read from the server's metrics),
  and the GPUs' names when the NVML sampler ran (a name maps to a preset by its
  marketing name: ``NVIDIA A100-SXM4-80GB`` is ``a100-80gb``). No server says its chunk
  budget over HTTP, so for a real server it must be given.

What the user gives with ``--engine KEY=VALUE`` wins over what the run recorded (a
what-if on another device), and ``sources`` says where each fact came from. When a fact
is neither recorded nor given, the calibration is refused in one line naming the keys
to give, rather than fitted on a default device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from perfmodel.config import EngineConfig
from perfmodel.models import GPUS, resolve_model
from runfmt.run import Run
from workloads.errors import InputError

#: The facts a fit is refused without: they decide the cost model's shape.
REQUIRED = ("gpu", "model", "max_num_batched_tokens")
#: NVML's device names, by the words that pick a preset (all must appear, case-folded).
_NVML_NAMES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("h100",), "h100-sxm"),
    (("h200",), "h200"),
    (("a100", "80gb"), "a100-80gb"),
    (("l40s",), "l40s"),
    (("mi300x",), "mi300x"),
)


@dataclass(frozen=True)
class TargetConfig:
    """The engine a run was measured on, and where each of its facts came from
    (``run.json``, the GPU sampler, ``--engine``; a field not listed is the default)."""

    config: EngineConfig
    sources: dict[str, str]


def gpu_preset(nvml_name: str) -> str | None:
    """The preset a GPU's NVML name stands for (``None``: no preset matches)."""
    words = nvml_name.lower()
    for needles, preset in _NVML_NAMES:
        if all(needle in words for needle in needles) and preset in GPUS:
            return preset
    return None


def _sampled_gpu(run: Run) -> tuple[str | None, str | None]:
    """The preset of the GPU the run's sampler saw, and the name it saw (one kind only)."""
    try:
        names = run.tables.gpu.get("name")
    except (OSError, ValueError, KeyError):
        return None, None
    seen = sorted({str(n) for n in names.dropna()}) if names is not None else []
    if len(seen) != 1:
        return None, ", ".join(seen) or None
    return gpu_preset(seen[0]), seen[0]


def _model_of(name: str | None) -> str | None:
    """``name`` when the cost model can describe it (a preset or a model's folder)."""
    if not name:
        return None
    try:
        resolve_model(name)
    except (InputError, OSError, ValueError):
        return None
    return name


def _recorded(run: Run) -> tuple[dict[str, Any], dict[str, str], str]:
    """What the run's ``run.json`` (and GPU table) say of its engine, their sources, and
    what kind of server it was (for the refusal)."""
    info = run.info
    if info is None:
        return {}, {}, "a run without run.json"
    target = info.target
    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    if target.engine is not None:  # the embedded engine: its whole configuration
        values = {k: v for k, v in target.engine.items() if k in fields}
        return values, dict.fromkeys(values, "run.json"), "the embedded engine"
    values: dict[str, Any] = {}
    model = _model_of(target.model)
    if model is not None:
        values["model"] = model
    if target.vocab_size:
        values["vocab_size"] = target.vocab_size
    if info.oracle.block_size:
        values["block_size"] = info.oracle.block_size
    if info.oracle.num_blocks:
        values["num_gpu_blocks"] = info.oracle.num_blocks
    sources = dict.fromkeys(values, "run.json")
    preset, seen = _sampled_gpu(run)
    if preset is not None:
        values["gpu"], sources["gpu"] = preset, f"GPU sampler ({seen})"
    return values, sources, f"a {target.flavour or 'real'} server"


def target_config(
    run: Run, user: EngineConfig, given: Collection[str], flag: str = "--engine"
) -> TargetConfig:
    """The engine ``run`` was measured on: what it recorded, overridden by the keys the
    user gave (``given``, their values in ``user``). ``InputError`` naming ``flag`` when
    a fact of ``REQUIRED`` is neither recorded nor given."""
    values, sources, kind = _recorded(run)
    for key in given:
        values[key], sources[key] = getattr(user, key), flag
    missing = [key for key in REQUIRED if key not in values]
    if missing:
        give = " ".join(f"{flag} {key}=…" for key in missing)
        raise InputError(
            flag,
            f"{run.path} ({kind}) does not record its {', '.join(missing)}, and a fit on a "
            "default would describe another engine",
            f"give them: {give}",
        )
    config = dataclasses.replace(EngineConfig(), **values)
    try:
        config.validate()
    except InputError as exc:
        source = sources.get(exc.field, "default")
        raise InputError(flag, f"{exc.field} ({source}): {exc.problem}", exc.fix) from None
    return TargetConfig(config, sources)


def described(target: TargetConfig) -> str:
    """One line: the target's shape-deciding facts and where each came from."""
    config = target.config
    return ", ".join(
        f"{key} {getattr(config, key)} ({target.sources.get(key, 'default')})"
        for key in (*REQUIRED, "tensor_parallel_size")
    )
