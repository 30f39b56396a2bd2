"""``bench`` spoken the way ``vllm bench serve`` users speak it.

vLLM's flags that have a meaning here are translated to ours: ``--dataset-name`` and
``--dataset-path`` (and our ``--dataset KIND[:FILE]``) name the workload;
``--random-input-len``/``--random-output-len``/``--random-range-ratio`` set the random
dataset's lengths (``--random-*`` alone picks the random dataset); ``--goodput
ttft:500 tpot:50`` is ``--slo`` in vLLM's form, milliseconds. ``--gpu`` names the GPU the
embedded engine models, as on ``serve`` and ``diagnose``; NVML sampling is
``--gpu-telemetry`` (``--gpu auto|off``, its old spelling, still works, with a note).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workloads.errors import InputError

if TYPE_CHECKING:
    from prefillscope.bench_flags import BenchFlags
    from runfmt.slo import Slo

#: What ``--gpu`` meant on ``bench`` before it named a GPU preset.
OLD_TELEMETRY_VALUES = ("auto", "off")
#: Dataset kinds ``--dataset``/``--dataset-name`` take, and whether they need a file.
DATASETS = {"random": False, "sharegpt": True, "jsonl": True}


def workload_name(flags: BenchFlags) -> str:
    """The workload ``flags`` name: ``--workload``, a dataset, or vLLM's random lengths."""
    dataset = _dataset(flags)
    if flags.workload and dataset:
        raise InputError("--dataset", "names a workload too", "give --workload or --dataset")
    if flags.workload:
        return flags.workload
    if dataset:
        return dataset
    if _random_lengths(flags):
        return "random"
    raise InputError(
        "--workload",
        "say what to send",
        "e.g. --workload multi-turn, --dataset sharegpt:FILE or --random-input-len 1024",
    )


def _dataset(flags: BenchFlags) -> str | None:
    given = flags.dataset
    name = flags.dataset_name
    path = flags.dataset_path
    if given and (name or path):
        raise InputError("--dataset", "given twice", "use --dataset KIND:FILE or vLLM's pair")
    if name or path:
        if not name:
            raise InputError("--dataset-name", "missing for --dataset-path", "e.g. sharegpt")
        given = f"{name}:{path}" if path else name
    if not given:
        return None
    kind, _, file = given.partition(":")
    vllm_form = bool(name or path)  # the flags the user typed name the error
    if kind not in DATASETS:
        if vllm_form:
            raise InputError(
                "--dataset-name", f"unknown dataset {kind!r}", "use random, sharegpt or jsonl"
            )
        raise InputError(
            "--dataset", f"unknown dataset {kind!r}", "use random, sharegpt:FILE or jsonl:FILE"
        )
    if DATASETS[kind] and not file:
        if vllm_form:
            raise InputError("--dataset-path", f"{kind} needs a file", "give --dataset-path FILE")
        raise InputError("--dataset", f"{kind} needs a file", f"write {kind}:FILE")
    if file and not Path(file).expanduser().is_file():
        flag = "--dataset-path" if vllm_form else "--dataset"
        problem = "is a folder, not a file" if Path(file).expanduser().is_dir() else "no such file"
        raise InputError(flag, f"{file}: {problem}", "give the path of the dataset file")
    return given


def _random_lengths(flags: BenchFlags) -> dict[str, Any]:
    given = {
        "input_len": flags.random_input_len,
        "output_len": flags.random_output_len,
        "range_ratio": flags.random_range_ratio,
    }
    return {k: v for k, v in given.items() if v is not None}


def dataset_overrides(flags: BenchFlags, given: dict[str, Any]) -> dict[str, Any]:
    """``load_spec`` overrides vLLM's ``--random-*`` flags stand for; and, for one of
    vLLM's datasets (named by its flags, not ``--workload``) with no load said
    (``given``: the overrides so far), vLLM's default load: every request at once
    (``--request-rate inf``)."""
    lengths = _random_lengths(flags)
    if lengths and (flags.workload or "random") != "random":
        flag = "--random-" + next(iter(lengths)).replace("_", "-")
        raise InputError(flag, "sets the random dataset's lengths", "drop --workload")
    load_keys = ("rate", "arrival", "concurrency", "duration")
    if not flags.workload and not any(given.get(key) is not None for key in load_keys):
        return lengths | {"rate": float("inf")}
    return lengths


def gpu_telemetry(flags: BenchFlags) -> str:
    """NVML sampling: ``--gpu-telemetry``, or ``--gpu auto|off`` written the old way."""
    if flags.gpu_telemetry not in OLD_TELEMETRY_VALUES:
        raise InputError(
            "--gpu-telemetry", f"unknown mode {flags.gpu_telemetry!r}", "use auto or off"
        )
    if flags.gpu in OLD_TELEMETRY_VALUES:
        print(
            f"prefillscope: --gpu {flags.gpu} is --gpu-telemetry {flags.gpu} now "
            "(--gpu names the GPU the embedded engine models)",
            file=sys.stderr,
        )
        return flags.gpu
    return flags.gpu_telemetry


def engine_flags(flags: BenchFlags, endpoint: str | None) -> list[str]:
    """``--engine`` settings, with ``--gpu PRESET`` as ``gpu=PRESET`` (embedded only)."""
    engine = list(flags.engine or [])
    if flags.gpu and flags.gpu not in OLD_TELEMETRY_VALUES:
        if endpoint:
            raise InputError(
                "--gpu", "names the GPU the embedded engine models", "drop --gpu or --endpoint"
            )
        engine.append(f"gpu={flags.gpu}")
    return engine


def picked_percentiles(flags: BenchFlags) -> tuple[tuple[str, ...], tuple[float, ...]] | None:
    """vLLM's ``--percentile-metrics`` (default ttft,tpot,itl) and ``--metric-percentiles``
    (default 99), when either is given."""
    from probes.percentiles import (
        DEFAULT_METRICS,
        DEFAULT_PERCENTILES,
        parse_metrics,
        parse_percentiles,
    )

    if flags.percentile_metrics is None and flags.metric_percentiles is None:
        return None
    return (
        parse_metrics(flags.percentile_metrics) if flags.percentile_metrics else DEFAULT_METRICS,
        parse_percentiles(flags.metric_percentiles)
        if flags.metric_percentiles
        else DEFAULT_PERCENTILES,
    )


def run_slo(flags: BenchFlags) -> Slo | None:
    """``--slo`` or vLLM's ``--goodput`` (one of them), parsed."""
    from probes.slo import parse_slo

    goodput = " ".join(flags.goodput or [])
    if flags.slo and goodput:
        raise InputError("--goodput", "is --slo in vLLM's form", "give one of them")
    text = flags.slo or goodput
    return parse_slo(text) if text else None
