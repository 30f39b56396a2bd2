"""``simulate --json``: the result of a grid of simulated configurations, and of
``simulate --against``, declared once as frozen sections.

``session.simulate`` builds them (each configuration's figures by bench's code,
``probes.latency``), ``session.against`` builds the replay's; the command writes them
through ``runfmt.codec`` and its table and ``--html`` page read the same types.

A set of simulated requests has bench's latencies (``summary.json``'s ``Stats`` under the
registry's keys, ``ttft_s``, ``itl_s``, ``tpot_s``, ``e2e_s`` …: mean, p50 … p99.9, count
and max, written at the top level of its object as in ``summary.json``, so a metric
declared once in ``runfmt.metrics`` is one more key here), the share of requests
meeting every SLO bound (``goodput``, bench's rule, ``null`` without an SLO), output
throughput over the makespan and the KV transfer's share of TTFT. Times are seconds of
the virtual clock; ``wall_s`` and ``speed`` are the simulator's own wall-clock time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from runfmt.calibration import Calibration
from runfmt.codec import EMPTY, key
from runfmt.slo import Slo
from runfmt.summary import LATENCY_KEY
from runfmt.summary_sections import Stats


@dataclass(frozen=True)
class SimFigures:
    """Bench's figures of a set of simulated requests: counted, completed and rejected
    requests, each registered latency's distribution by its key (``latencies``), the
    share meeting the SLO, output tokens per second over the makespan, the summed KV
    transfer waits over the summed TTFTs, and the completed requests' output tokens."""

    requests: int = 0
    completed: int = 0
    rejected: int = 0
    latencies: Mapping[str, Stats] = key(inline=LATENCY_KEY, default_factory=EMPTY)
    goodput: float | None = None
    output_tokens_per_s: float | None = None
    kv_transfer_share_of_ttft: float = 0.0
    output_tokens: int = 0
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    def statistic(self, metric: str, name: str) -> float | None:
        """One statistic (``p99``, ``max`` …) of ``metric``'s distribution (``ttft_s`` …);
        ``None`` when there is none."""
        stats = self.latencies.get(metric)
        value = getattr(stats, name, None) if stats is not None else None
        return value if isinstance(value, int | float) else None


F = TypeVar("F", bound=SimFigures)


def extended(cls: type[F], figures: SimFigures, **more: Any) -> F:
    """A ``cls`` (a section extending ``SimFigures``) of ``figures`` and the fields
    ``cls`` adds (``more``)."""
    return cls(**{f.name: getattr(figures, f.name) for f in fields(SimFigures)}, **more)


@dataclass(frozen=True)
class BreakEven:
    """The slowest KV link at which a P/D configuration does as well as the monolithic one
    of its chunk budget (``gbps``), the last bracket of the bisection, and why, in words
    (``gbps`` ``null`` when even the fastest link does not reach it)."""

    gbps: float | None = None
    bracket_gbps: tuple[float, ...] | None = None
    note: str = ""
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class SimConfiguration(SimFigures):
    """One configuration of the grid: what it is (``label``, its chunk budget, its P:D
    split or its replicas, its GPUs), its figures, the simulator's wall time, whether it
    is on the Pareto front of TTFT p99 and ITL p99, and its break-even link (P/D only)."""

    label: str = ""
    chunk: int = 0
    disaggregate: str | None = None
    replicas: int | None = None
    gpus: int = 0
    wall_s: float = 0.0
    pareto: bool = False
    break_even: BreakEven | None = None


@dataclass(frozen=True)
class SimSpeed:
    """How fast the grid was simulated (wall clock): seconds, requests and output tokens
    of virtual clock a second."""

    grid_wall_s: float = 0.0
    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class SimulateResult:
    """``simulate --json``: whether the grid was complete (else why it stopped), the
    configurations planned, the engine's model and GPU, the KV link and transfer mode,
    the SLO (a latency's key → its bound in seconds), the workload's requests, each
    configuration, the simulator's speed, and with ``--calibrate`` the calibration
    (``runfmt.calibration``)."""

    status: str = "complete"
    reason: str | None = None
    planned_configurations: int = 0
    model: str = ""
    gpu: str = ""
    link: Mapping[str, Any] = field(default_factory=EMPTY)
    kv_transfer: str = ""
    slo: Slo = field(default_factory=Slo)
    requests: int = 0
    configurations: tuple[SimConfiguration, ...] = ()
    speed: SimSpeed = field(default_factory=SimSpeed)
    calibration: Calibration | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    @property
    def complete(self) -> bool:
        return self.status == "complete"


@dataclass(frozen=True)
class StageFigures(SimFigures):
    """``simulate --against``: the figures of the requests sent in one load stage
    (``stage``; ``-1``: the whole run)."""

    stage: int = 0


@dataclass(frozen=True)
class AgainstScore:
    """One predicted figure beside the measured one (seconds): a stage's ``metric``
    (``ttft_s`` …) and statistic; ``error = predicted / actual − 1`` (``null`` when
    either is unknown or the actual is zero). ``low`` and ``high``: the least and most
    it came to over the replay's draws of the client's randomness (``AgainstResult.draws``;
    ``predicted`` is the first draw's): how far chance alone moves it."""

    stage: int = 0
    metric: str = ""
    stat: str = ""
    predicted: float | None = None
    actual: float | None = None
    error: float | None = None
    low: float | None = None
    high: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    @classmethod
    def of(
        cls,
        stage: int,
        metric: str,
        stat: str,
        predicted: float | None,
        actual: float | None,
        draws: tuple[float | None, ...] = (),
    ) -> AgainstScore:
        """The score with its error and its range over ``draws`` (the other draws'
        figures; none: the range is the figure)."""
        error = None if predicted is None or not actual else predicted / actual - 1
        known = [v for v in (predicted, *draws) if v is not None]
        low, high = (min(known), max(known)) if known else (None, None)
        return cls(stage, metric, stat, predicted, actual, error, low, high)


@dataclass(frozen=True)
class AgainstResult:
    """``simulate --against --json``: the replayed run, the engine it was replayed on
    (model, GPU, tensor and data parallelism, budget, batch limit, asynchronous scheduling and
    frontend time per request), the engine's steps and
    those a different budget could have scheduled differently, the run's arrival
    process, client timeout and tokens counted per streamed token, the requests replayed,
    timed out and measured as failed, each stage's figures, the scores and the wall
    time."""

    run: str = ""
    model: str = ""
    gpu: str = ""
    tensor_parallel_size: int = 1
    #: Engine replicas the requests were dealt over (vLLM's ``data_parallel_size``).
    data_parallel_size: int = 1
    max_num_batched_tokens: int = 0
    max_num_seqs: int = 0
    #: vLLM V1's asynchronous scheduling, and the frontend's seconds per request, as
    #: replayed (``session.lifecycle``: a ``vllm`` server's).
    async_scheduling: bool = False
    host_overhead_per_request_s: float = 0.0
    steps: int = 0
    budget_bound_steps: int = 0
    arrivals: str = ""
    timeout_s: float | None = None
    client_tokens_per_token: float | None = None
    requests: int = 0
    timed_out: int = 0
    measured_failures: int | None = None
    configurations: tuple[StageFigures, ...] = ()
    scores: tuple[AgainstScore, ...] = ()
    #: Replays of the run, each another draw of the client's arrivals, prompt order and
    #: token ids (seeds ``seed`` …): the configurations and each score's ``predicted``
    #: are the first's, each score's ``low``/``high`` span them all.
    draws: int = 1
    seed: int = 0
    wall_s: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)
