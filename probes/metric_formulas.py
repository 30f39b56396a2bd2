"""How each latency is computed per request: the request-table columns it reads
(``inputs``) and its ``formula`` over them (numpy arrays in seconds, one value per
request, NaN where a request has none), registered against the metric's identity
(``runfmt.metrics``: its key, names, unit, direction).

A new latency is one module: it calls ``latency(Metric(...), inputs=..., formula=...)``,
which declares the identity in ``runfmt.metrics`` and registers the formula here;
``probes.latency`` computes every registered formula, so the metric reaches
``summary.json``, ``simulate``, ``compare`` and its gates, the report and ``sweep`` with
no other edit. A latency with no formula here is ITL: the per-token gaps of the chunks
table (``probes.token_gaps``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runfmt import metrics
from runfmt.metrics import DISPATCH_LAG, E2E, E2E_SENT, TPOT, TTFT, TTFT_SENT, Metric


@dataclass(frozen=True)
class Formula:
    """One metric per request: the request-table columns it reads, in its arguments'
    order, and how."""

    inputs: tuple[str, ...]
    compute: Callable[..., Any]

    def values(self, columns: Mapping[str, Any]) -> Any:
        """The metric of each request, from the requests' ``columns`` (by name)."""
        return self.compute(*(columns[name] for name in self.inputs))


_FORMULAS: dict[str, Formula] = {}


def _register(metric: Metric, inputs: tuple[str, ...], compute: Callable[..., Any]) -> Metric:
    _FORMULAS[metric.key] = Formula(inputs, compute)
    return metric


def latency(metric: Metric, *, inputs: tuple[str, ...], formula: Callable[..., Any]) -> Metric:
    """Declare ``metric`` a latency of every run (``runfmt.metrics.declare_latency``:
    ``ValueError`` when its key or prefix is taken), computed per request by
    ``formula`` over the request-table columns ``inputs``."""
    return _register(metrics.declare_latency(metric), inputs, formula)


def unregister(key: str) -> None:
    """Forget the latency registered under ``key``, its identity and its formula (a
    test's toy)."""
    metrics.undeclare(key)
    _FORMULAS.pop(key, None)


def formula(metric: Metric) -> Formula | None:
    """How ``metric`` is computed per request; None when it is not (ITL, from the gaps)."""
    return _FORMULAS.get(metric.key)


def per_request_formula(metric: Metric) -> Formula:
    """How ``metric`` is computed per request; ``ValueError`` when it is not."""
    found = formula(metric)
    if found is None:
        raise ValueError(f"{metric.key} is not computed per request")
    return found


def per_request() -> tuple[tuple[Metric, Formula], ...]:
    """Every latency computed per request, in the registry's order, then the dispatch lag
    (a client-health figure, computed the same way)."""
    chosen = (*metrics.latencies(), DISPATCH_LAG)
    return tuple((m, _FORMULAS[m.key]) for m in chosen if m.key in _FORMULAS)


def _difference(later: Any, earlier: Any) -> Any:
    return later - earlier


def _tpot(first: Any, end: Any, tokens: Any) -> Any:
    import numpy as np

    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tokens > 1, (end - first) / (tokens - 1), np.nan)


_register(TTFT, ("first_token_s", "intended_s"), _difference)
_register(TTFT_SENT, ("first_token_s", "sent_s"), _difference)
_register(TPOT, ("first_token_s", "end_s", "output_tokens"), _tpot)
_register(E2E, ("end_s", "intended_s"), _difference)
_register(E2E_SENT, ("end_s", "sent_s"), _difference)
_register(DISPATCH_LAG, ("sent_s", "intended_s"), _difference)
