"""What one bench run is asked to do: ``BenchOptions``, the ``bench`` flags as fields.

``session.bench_runner.run_bench`` runs it; ``diagnose ab`` and ``sweep`` derive one per
arm or point (``dataclasses.replace``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from loadgen.sse import MAX_EVENT_BYTES
from runfmt.slo import Slo
from simengine.settings import EngineSettings


@dataclass
class BenchOptions:
    """Everything one bench run needs; the ``bench`` flags map onto these fields."""

    workload: str
    #: ``load_spec`` overrides: flat keys (``num_requests``, ``rate``, ``concurrency``,
    #: ``seed``, family keys …) as ``--set`` takes them; ``None`` values are ignored.
    overrides: dict[str, object] = field(default_factory=dict)
    endpoint: str | None = None
    backend: str = "auto"
    api: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    vocab_size: int | None = None
    tokenizer: str | None = None
    #: The embedded engine's settings (only without ``endpoint``); default config if None.
    engine: EngineSettings | None = None
    out: Path | None = None
    slo: Slo | None = None
    max_concurrency: int | None = None
    timeout_s: float | None = 600.0
    max_event_bytes: int = MAX_EVENT_BYTES
    cache_protocol: str = "salt"
    warmup: int = 0
    metrics_interval_s: float = 0.5
    server_metrics: bool = True
    #: A user's TOML mapping of the server's metric names (its flavour's built-in if None).
    mapping_file: Path | None = None
    prometheus: str | None = None
    gpu: str = "auto"
    #: The oracle's block and pool size when the server's metrics do not say (or to override).
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    #: The oracle's cache model (``workloads.cache_model``); None: the server's flavour's.
    cache_model: str | None = None
    #: Send requests longer than the server's max_model_len instead of refusing the run.
    allow_overlong: bool = False
    #: vLLM's --percentile-metrics and --metric-percentiles: extra percentiles in the
    #: summary (``summary["percentiles"]``).
    percentiles: tuple[tuple[str, ...], tuple[float, ...]] | None = None
    #: Send one small request first and fail at once, with the server's message, if it fails.
    smoke_test: bool = True
    #: Keep every request's output token ids and their logprobs (``diagnose ab
    #: --check-outputs`` compares what the model said across configurations).
    record_outputs: bool = False
    #: Keep each request's streamed text (the ``output_text`` column; vLLM's
    #: ``generated_texts``).
    keep_text: bool = False
    #: A larger failed share of the measured requests makes the run exit 4
    #: (``session.exit_status``); a run where none succeeded exits 4 regardless.
    max_error_rate: float | None = None
    #: A smaller share of the measured requests meeting ``slo`` makes the run exit 5.
    min_goodput: float | None = None
    #: ``--label KEY=VALUE`` pairs recorded in ``run.json``.
    labels: dict[str, str] = field(default_factory=dict)
    #: The command line as typed, for ``run.json`` (secrets are redacted there).
    command: list[str] = field(default_factory=list)
    #: Worker processes sending the plan (``session.workers``); None: as many as the
    #: planned token rate needs (``session.shards.workers_needed``).
    workers: int | None = None
    #: Send the shards from Ray actors: ``auto`` (the running cluster), an address, or
    #: ``local`` (a cluster of this host started for the run); None: worker processes.
    ray: str | None = None
    #: Where the Ray actors go: ``cpu`` (None: the default) or ``node``
    #: (``session.ray_placement``).
    ray_placement: str | None = None
