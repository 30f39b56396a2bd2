"""``diagnose ab --predict``: what the simulator said the A/B would show, next to what it did.

Before the trials, each arm's engine (the embedded engine's ``--engine`` settings with the
arm's chunk budget; for a launched or remote server the same settings stand in for it, as
given) replays the A/B's workload on the virtual clock (:mod:`session.simulate`). After
them, ``ab.json`` gets a ``prediction`` block: per arm and metric the predicted and the
measured value and the relative error, and per compared arm the predicted and measured
ratio to the reference arm — the figure the verdict is about — so the model's error is
measured every time an A/B is run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from perfmodel.config import EngineConfig
from probes.metric_registry import AB_PREDICTED, json_name, stat_of
from runfmt.abresult import ArmResult
from session.sim_workload import load_workload
from session.simulate import GridPoint, SimulateSpec, run_point

#: ab.json's per-arm metric → the simulator's (figure, quantile): the registry's
#: ``AB_PREDICTED``, each under its JSON name.
METRICS = {
    json_name(name): (metric.key, stat)
    for name in AB_PREDICTED
    for metric, stat in (stat_of(name),)
}


def predict_arms(
    workload: str, overrides: dict[str, object], base: EngineConfig, chunks: list[int]
) -> dict[str, Any]:
    """Each arm's predicted metrics (by chunk budget), from one replay per arm."""
    sim_workload = load_workload(workload, [], overrides, base)
    spec = SimulateSpec(base, chunks, break_even=False)
    arms = {}
    for chunk in chunks:
        row = run_point(spec, GridPoint(chunk), sim_workload)
        arms[chunk] = {key: row.statistic(fig, q) for key, (fig, q) in METRICS.items()}
    engine = dataclasses.asdict(base)
    return {
        "engine": {k: engine[k] for k in ("model", "gpu", "tensor_parallel_size")},
        "arms": arms,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def confront(
    predicted: dict[str, Any], arms: Sequence[ArmResult], reference_chunk: int
) -> dict[str, Any]:
    """Predicted vs measured per arm and metric, and per arm its ratio to the reference."""
    rows = []
    for arm in arms:
        guess = predicted["arms"].get(arm.chunk, {})
        metrics = {}
        for key in METRICS:
            p, m = guess.get(key), arm.figure(key)
            error = (p - m) / m if p is not None and m else None
            metrics[key] = {"predicted": p, "measured": m, "relative_error": error}
        rows.append({"arm": arm.label, "chunk": arm.chunk, "metrics": metrics})
    ref = next((r for r in rows if r["chunk"] == reference_chunk), None)
    ratios = []
    for row in rows:
        if ref is None or row is ref:
            continue
        for key in METRICS:
            mine, theirs = row["metrics"][key], ref["metrics"][key]
            ratios.append(
                {
                    "arm": row["arm"],
                    "metric": key,
                    "predicted_ratio": _ratio(mine["predicted"], theirs["predicted"]),
                    "measured_ratio": _ratio(mine["measured"], theirs["measured"]),
                }
            )
    return {"engine": predicted["engine"], "arms": rows, "ratios_to_reference": ratios}
