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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfmodel.config import EngineConfig
from runfmt.ab_prediction import (
    ArmPrediction,
    PredictedFigure,
    PredictedRatio,
    Prediction,
    PredictionEngine,
)
from runfmt.abresult import ArmResult
from runfmt.codec import frozen_map
from runfmt.metrics import AB_PREDICTED, json_name, stat_of
from session.sim_workload import load_workload
from session.simulate import GridPoint, SimulateSpec, run_point

#: ab.json's per-arm metric → the simulator's (figure, quantile): the registry's
#: ``AB_PREDICTED``, each under its JSON name.
METRICS = {
    json_name(name): (metric.key, stat)
    for name in AB_PREDICTED
    for metric, stat in (stat_of(name),)
}


@dataclass(frozen=True)
class Predicted:
    """Each arm's predicted figures by chunk budget (``METRICS``' names), and the engine
    they were simulated on."""

    engine: PredictionEngine
    arms: Mapping[int, Mapping[str, float | None]]


def predict_arms(
    workload: str, overrides: dict[str, object], base: EngineConfig, chunks: list[int]
) -> Predicted:
    """Each arm's predicted metrics (by chunk budget), from one replay per arm."""
    sim_workload = load_workload(workload, [], overrides, base)
    spec = SimulateSpec(base, chunks, break_even=False)
    arms = {}
    for chunk in chunks:
        row = run_point(spec, GridPoint(chunk), sim_workload)
        arms[chunk] = {key: row.statistic(fig, q) for key, (fig, q) in METRICS.items()}
    engine = PredictionEngine(base.model, base.gpu, base.tensor_parallel_size)
    return Predicted(engine, arms)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def confront(predicted: Predicted, arms: Sequence[ArmResult], reference_chunk: int) -> Prediction:
    """Predicted vs measured per arm and metric, and per arm its ratio to the reference."""
    rows = []
    for arm in arms:
        guess = predicted.arms.get(arm.chunk, {})
        metrics = {key: PredictedFigure.of(guess.get(key), arm.figure(key)) for key in METRICS}
        rows.append(ArmPrediction(arm.label, arm.chunk, frozen_map(metrics)))
    ref = next((r for r in rows if r.chunk == reference_chunk), None)
    ratios = []
    for row in rows:
        if ref is None or row is ref:
            continue
        for key in METRICS:
            mine, theirs = row.metrics[key], ref.metrics[key]
            ratios.append(
                PredictedRatio(
                    arm=row.arm,
                    metric=key,
                    predicted_ratio=_ratio(mine.predicted, theirs.predicted),
                    measured_ratio=_ratio(mine.measured, theirs.measured),
                )
            )
    return Prediction(predicted.engine, tuple(rows), tuple(ratios))
