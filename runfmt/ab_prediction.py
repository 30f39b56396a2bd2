"""``ab.json``'s ``prediction`` (``diagnose ab --predict``): what the simulator said each
arm would measure, beside what it measured.

``session.ab_prediction`` builds it after the trials and ``session.ab_runner`` writes it
in ``ab.json`` (``runfmt.abresult``). Figures are keyed by ``ab.json``'s per-arm names
(``itl_p99_s`` …, the metric registry's ``AB_PREDICTED``), in seconds; a figure or ratio
that is unknown (no measurement, a zero to divide by) is ``null``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runfmt.codec import EMPTY


@dataclass(frozen=True)
class PredictionEngine:
    """The engine the simulator replayed each arm on: model, GPU, tensor parallelism."""

    model: str = ""
    gpu: str = ""
    tensor_parallel_size: int = 1
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class PredictedFigure:
    """One figure of one arm: predicted, measured, and ``(predicted − measured) /
    measured``."""

    predicted: float | None = None
    measured: float | None = None
    relative_error: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    @classmethod
    def of(cls, predicted: float | None, measured: float | None) -> PredictedFigure:
        """The figure with its relative error."""
        if predicted is None or not measured:
            return cls(predicted, measured, None)
        return cls(predicted, measured, (predicted - measured) / measured)


@dataclass(frozen=True)
class ArmPrediction:
    """One arm (its label and chunk budget): each predicted figure by name."""

    arm: str = ""
    chunk: int = 0
    metrics: Mapping[str, PredictedFigure] = field(default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class PredictedRatio:
    """An arm's figure over the reference arm's, predicted and measured: the figure the
    verdict is about."""

    arm: str = ""
    metric: str = ""
    predicted_ratio: float | None = None
    measured_ratio: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class Prediction:
    """``prediction``: the engine, each arm's figures, and each compared arm's ratios to
    the reference arm."""

    engine: PredictionEngine = field(default_factory=PredictionEngine)
    arms: tuple[ArmPrediction, ...] = ()
    ratios_to_reference: tuple[PredictedRatio, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)
