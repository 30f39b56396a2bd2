"""``simulate --calibrate --json``'s ``calibration`` block: the cost model fitted to a run,
and with ``--holdout`` its prediction of another run, declared once as frozen sections.

``session.calibrate`` builds them (``session.calibrate_decode`` the decode's fit,
``session.calibrate_reading`` a run's figures); ``runfmt.simresult.SimulateResult`` carries
the block, the command writes it through ``runfmt.codec`` and its text view reads the same
types.

Conventions: every figure is in seconds (``chunk_token_s``: seconds per token scheduled in
a step carrying prompt chunks). A run's ``FitFigures`` are measured over its measured,
completed requests — TTFT from the actual send (median and mean), the client's
per-token gaps (ITL p50 and p99), and the server's own means (its clock) where it exposes
them; a replay's are the same figures of its simulated requests, its gaps widened by the
run's step jitter. A figure's name is the metric registry's (``ttft_p50`` is
``stat_name(TTFT, "p50")``). ``relative_error`` is ``predicted / measured − 1`` per figure
(``null`` when either is unknown or the measured one is 0). ``fitted`` holds the
``EngineConfig`` settings the fit set (the cost model's, ``perfmodel.config``); ``config``
is the whole fitted ``EngineConfig`` under its field names, an open set kept as written
(as ``run.json``'s ``target.engine``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from runfmt.codec import EMPTY, frozen_map, key


@dataclass(frozen=True)
class FitFigures:
    """A run's figures the fit and its checks compare (seconds): TTFT p50 from the actual
    send, the client's ITL p50 and p99, the server's mean pure-decode step, the mean gap
    between tokens (the server's ITL histogram's sum ÷ count, else the client's), the mean
    TTFT from the actual send, the server's mean step carrying prompt chunks and its
    seconds per token in such steps (``None``: the server does not expose it)."""

    ttft_p50: float = 0.0
    itl_p50: float = 0.0
    itl_p99: float = 0.0
    decode_step_mean: float | None = None
    itl_mean: float | None = None
    ttft_mean: float | None = None
    chunk_step_mean: float | None = None
    chunk_token_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The figures' names, in order."""
        return tuple(f.name for f in fields(cls) if f.name != "extra")

    def figure(self, name: str) -> float | None:
        """The figure ``name`` (``ttft_p50`` …); ``None`` when unknown or not one of
        ``names()``."""
        return getattr(self, name) if name in self.names() else None

    def errors(self, measured: FitFigures) -> Mapping[str, float | None]:
        """These figures (predicted) against ``measured``: ``predicted / measured − 1`` per
        figure, ``None`` where either is unknown or the measured one is 0."""
        out: dict[str, float | None] = {}
        for name in self.names():
            actual, predicted = measured.figure(name), self.figure(name)
            out[name] = None if not actual or predicted is None else (predicted - actual) / actual
        return frozen_map(out)


@dataclass(frozen=True)
class FittedSettings:
    """The ``EngineConfig`` settings the fit set: the decode's bandwidth efficiency and
    per-sequence host overhead, the per-step host overhead (only where the server says
    nothing of its steps; absent otherwise) and the prefill MFU."""

    bandwidth_efficiency: float = 1.0
    host_overhead_per_seq_s: float = 0.0
    host_overhead_step_s: float | None = key(omit_none=True, default=None)
    prefill_mfu: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    def settings(self) -> dict[str, float]:
        """The settings by their ``EngineConfig`` names (those set), in order: what a
        fitted engine replaces."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "extra" and getattr(self, f.name) is not None
        }


@dataclass(frozen=True)
class DecodeFit:
    """The decode's fit (``session.calibrate_decode``): efficiency and per-sequence
    overhead, the pure-decode gaps fitted and those left out beside another request's
    prefill, the median |modelled − measured| / measured, the mean pure-decode step
    modelled and measured (the server's, else the gaps'), whether the server's mean step
    held the fit (``None``: the server has none), the parameter bound it ended on, the
    per-step host overhead found beside the configured one (0 unless fitted), and with a
    fitted per-step overhead whether a free efficiency fitted the gaps better than full
    bandwidth beyond the run's noise (``None``: not tested) and by how much (mean
    |residual| per gap: the gain, its interval's low and high end)."""

    bandwidth_efficiency: float = 1.0
    host_overhead_per_seq_s: float = 0.0
    gaps: int = 0
    mixed_gaps: int = 0
    median_abs_error: float = 0.0
    step_mean_fitted_s: float = 0.0
    step_mean_measured_s: float = 0.0
    anchored: bool | None = None
    at_bound: str | None = None
    step_overhead_added_s: float = 0.0
    efficiency_decided: bool | None = None
    efficiency_gain_s: tuple[float, ...] | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class Holdout:
    """``--holdout``: the run the fit never saw, its requests, its engine (each fact and
    where it came from) and chunk budget; its figures measured and predicted, their
    relative errors, the goal (a median's) and each judged figure's goal, whether each is
    within it, and the warnings on the run (a limited client)."""

    run: str = ""
    requests: int = 0
    target: str = ""
    max_num_batched_tokens: int = 0
    measured: FitFigures = field(default_factory=FitFigures)
    predicted: FitFigures = field(default_factory=FitFigures)
    relative_error: Mapping[str, float | None] = field(default_factory=EMPTY)
    goal: float = 0.0
    goals: Mapping[str, float] = field(default_factory=EMPTY)
    within_goal: Mapping[str, bool] = field(default_factory=EMPTY)
    warnings: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class Calibration:
    """``simulate --calibrate``: the run fitted, its requests and how its prompts were
    rebuilt, its engine (each fact and where it came from), the settings fitted and the
    decode's fit, the fitted engine, the transport added to every replayed TTFT, the step
    jitter (quantiles of the decode residuals, seconds) every replayed gap is widened by,
    the run's figures measured and replayed and their relative errors, the figures the
    fit was fitted to (the rest are checks), where the decode's and the ITL's figures
    came from, the fit's tolerance, the warnings on the run, and the held-out check."""

    run: str = ""
    requests: int = 0
    prompts: str = ""
    target: str = ""
    target_sources: Mapping[str, str] = field(default_factory=EMPTY)
    fitted: FittedSettings = field(default_factory=FittedSettings)
    decode_fit: DecodeFit = field(default_factory=DecodeFit)
    config: Mapping[str, Any] = field(default_factory=EMPTY)
    transport_s: float = 0.0
    step_jitter_s: tuple[float, ...] = ()
    measured: FitFigures = field(default_factory=FitFigures)
    predicted: FitFigures = field(default_factory=FitFigures)
    relative_error: Mapping[str, float | None] = field(default_factory=EMPTY)
    fit_targets: tuple[str, ...] = ()
    decode_source: str = ""
    itl_source: str | None = None
    tolerance: float = 0.0
    warnings: tuple[str, ...] = ()
    holdout: Holdout | None = key(omit_none=True, default=None)  # noqa: RUF009
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    @property
    def all_warnings(self) -> tuple[str, ...]:
        """The calibrated run's warnings, then the held-out run's."""
        return self.warnings + (self.holdout.warnings if self.holdout is not None else ())
