"""The flags ``bench`` and ``diagnose ab`` share, defined once.

An A/B trial must be configured exactly as ``prefillscope bench`` would configure one
run, so both commands take the same workload, load, target and probe flags.
``BenchFlags`` holds them (each field's annotation is its typer option);
``takes_bench_flags`` adds them to a typer command next to the command's own options
and calls it with one ``flags: BenchFlags``; ``BenchFlags.options`` validates them and
builds the ``BenchOptions`` of one run. A flag added here appears in both commands.

The flags are declared on every start of the CLI (``--help`` lists them), so this module
imports only what declaring them needs; the runner and the parsers that pull in numpy and
pandas are imported when a command reads the flags.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from loadgen.sse import MAX_EVENT_BYTES
from loadgen.target import api_key_from_env
from prefillscope.engine_flags import parse_engine_flags
from workloads.cache_model import parse_cache_model
from workloads.errors import InputError
from workloads.limits import (
    MAX_BLOCK_SIZE,
    MAX_CONCURRENCY,
    MAX_PLAN_REQUESTS,
    MAX_POOL_BLOCKS,
    MAX_RATE,
    MAX_SECONDS,
    MAX_TOKENS,
    MAX_VOCAB_SIZE,
    PLAN_REASON,
    RATE_REASON,
    Bound,
)
from workloads.registry import known_workloads

if TYPE_CHECKING:
    from session.bench_options import BenchOptions

R = TypeVar("R")

_IN_FLIGHT = "each request in flight is a task and a connection"
MAX_WORKERS = 256
#: Every numeric flag's bounds, checked before anything is written (``BenchFlags.validate``).
FLAG_BOUNDS: dict[str, Bound] = {
    "num_requests": Bound(1, MAX_PLAN_REQUESTS, whole=True, why=PLAN_REASON),
    "duration": Bound(0, MAX_SECONDS, above=True, why="a run is at most a week"),
    # inf: every request at t=0, as vLLM's; a finite rate beyond a billion a second is that
    "rate": Bound(0, MAX_RATE, above=True, inf=True, why=RATE_REASON),
    "burstiness": Bound(0, 1e6, above=True),
    "max_concurrency": Bound(1, MAX_CONCURRENCY, whole=True, why=_IN_FLIGHT),
    "concurrency": Bound(
        1, MAX_CONCURRENCY, whole=True, why="each user is a task and a connection"
    ),
    "seed": Bound(0, 2**63 - 1, whole=True),
    "block_size": Bound(1, MAX_BLOCK_SIZE, whole=True),
    "num_gpu_blocks": Bound(
        1, MAX_POOL_BLOCKS, whole=True, why="the pool model keeps a table entry per block"
    ),
    "max_event_bytes": Bound(1024, 2**30, whole=True, why="an event is held whole in memory"),
    "timeout": Bound(0, MAX_SECONDS, above=True, why="a request is given at most a week"),
    "warmup": Bound(0, MAX_PLAN_REQUESTS, whole=True, why=PLAN_REASON),
    "metrics_interval": Bound(0, 3600, above=True, why="a scrape at least every hour"),
    "vocab_size": Bound(2, MAX_VOCAB_SIZE, whole=True, why="token ids are 32-bit"),
    "random_input_len": Bound(1, MAX_TOKENS, whole=True),
    "random_output_len": Bound(1, MAX_TOKENS, whole=True),
    "random_range_ratio": Bound(0, 1),
    "workers": Bound(1, MAX_WORKERS, whole=True, why="a worker is a process"),
}


#: The flags whose comma list (``--rate 1,2,4,8``) makes ``bench`` run a sweep.
SWEEP_FLAGS = ("rate", "concurrency")


def rate_or_points(text: str) -> float | str:
    """``--rate``: one rate as a number; a comma list kept as its text (a sweep's points,
    parsed by ``session.sweep.parse_values``)."""
    return text if "," in text else float(text)


def users_or_points(text: str) -> int | str:
    """``--concurrency``: one user count; a comma list kept as its text (a sweep)."""
    return text if "," in text else int(text)


@dataclass
class BenchFlags:
    """What a user says about the traffic, the target's API and the probes of one run."""

    workload: Annotated[
        str | None,
        typer.Option(
            help=f"What to send: {known_workloads()} (or use --dataset).", show_default=False
        ),
    ] = None
    dataset: Annotated[
        str | None,
        typer.Option(help="Prompts from a dataset: random, sharegpt:FILE or jsonl:FILE."),
    ] = None
    dataset_name: Annotated[
        str | None, typer.Option(help="vLLM's form of --dataset: random, sharegpt or jsonl.")
    ] = None
    dataset_path: Annotated[
        str | None, typer.Option(help="The file of --dataset-name (as vLLM).")
    ] = None
    random_input_len: Annotated[
        int | None, typer.Option(help="Random dataset: prompt tokens (as vLLM).")
    ] = None
    random_output_len: Annotated[
        int | None, typer.Option(help="Random dataset: output tokens (as vLLM).")
    ] = None
    random_range_ratio: Annotated[
        float | None,
        typer.Option(help="Random dataset: lengths vary ± this share (as vLLM)."),
    ] = None
    backend: Annotated[str, typer.Option(help="auto, vllm, sglang, llamacpp or openai.")] = "auto"
    api: Annotated[str | None, typer.Option(help="completions, chat, sglang or llamacpp.")] = None
    model: Annotated[str | None, typer.Option(help="Model name (default: the server's).")] = None
    api_key: Annotated[
        str | None,
        typer.Option(help="API key (default: $PREFILLSCOPE_API_KEY or $OPENAI_API_KEY)."),
    ] = None
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Workload KEY=VALUE (repeatable).")
    ] = None
    label: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE recorded in run.json, shown by runs/compare (repeatable)."),
    ] = None
    num_requests: Annotated[
        int | None, typer.Option("--num-requests", "--num-prompts", help="Requests to send.")
    ] = None
    duration: Annotated[float | None, typer.Option(help="Seconds to send for.")] = None
    rate: Annotated[
        float | None,
        typer.Option(
            "--rate",
            "--request-rate",
            parser=rate_or_points,
            help="Requests per second (inf: all at once); 1,2,4,8: a sweep (bench).",
        ),
    ] = None
    arrival: Annotated[
        str | None, typer.Option(help="poisson, gamma, constant, ramp or trace.")
    ] = None
    burstiness: Annotated[
        float | None, typer.Option(help="Gamma shape as in vLLM (1: Poisson, <1: burstier).")
    ] = None
    max_concurrency: Annotated[
        int | None, typer.Option(help="Open loop: at most N in flight (the rest wait).")
    ] = None
    concurrency: Annotated[
        int | None,
        typer.Option(
            parser=users_or_points,
            help="Closed loop: N users, each sending when answered; 1,8,64: a sweep (bench).",
        ),
    ] = None
    seed: Annotated[int | None, typer.Option(help="Workload seed.")] = None
    slo: Annotated[
        str | None,
        typer.Option(help="Latency targets for goodput, e.g. ttft=500,itl=50 (ms unless 0.5s)."),
    ] = None
    goodput: Annotated[
        list[str] | None,
        typer.Option(help="vLLM's form of --slo: ttft:500 tpot:50 (ms; repeatable)."),
    ] = None
    percentile_metrics: Annotated[
        str | None,
        typer.Option(help="Latencies in the summary, e.g. ttft,tpot,itl,e2el (as vLLM)."),
    ] = None
    metric_percentiles: Annotated[
        str | None, typer.Option(help="Percentiles in the summary, e.g. 50,90,99 (as vLLM).")
    ] = None
    block_size: Annotated[
        int | None, typer.Option(help="Oracle block size (default: the server's).")
    ] = None
    num_gpu_blocks: Annotated[
        int | None, typer.Option(help="Oracle pool size in blocks (default: the server's).")
    ] = None
    cache_model: Annotated[
        str | None,
        typer.Option(help="Oracle cache model: blocks, radix[:PAGE], slots:N (default: flavour)."),
    ] = None
    cache_protocol: Annotated[
        str, typer.Option(help="reset (flush the server's cache), salt (per-run salt), warm.")
    ] = "salt"
    timeout: Annotated[float, typer.Option(help="Per-request timeout (s).")] = 600.0
    max_event_bytes: Annotated[
        int, typer.Option(help="Largest stream event; a longer one fails as stream_oversize.")
    ] = MAX_EVENT_BYTES
    warmup: Annotated[int, typer.Option(help="Unmeasured warm-up requests first.")] = 0
    metrics_interval: Annotated[float, typer.Option(help="Seconds between scrapes.")] = 0.5
    no_server_metrics: Annotated[
        bool, typer.Option("--no-server-metrics", help="Do not scrape the server's /metrics.")
    ] = False
    mapping: Annotated[
        Path | None,
        typer.Option(
            help="A TOML mapping of your own engine's /metrics names (see probes/mappings/)."
        ),
    ] = None
    prometheus: Annotated[
        str | None, typer.Option(help="Read the server's series from this Prometheus too.")
    ] = None
    gpu_telemetry: Annotated[
        str, typer.Option(help="Sample the GPUs with NVML: auto (when present) or off.")
    ] = "auto"
    gpu: Annotated[
        str | None,
        typer.Option(help="GPU preset the embedded engine models (as serve --gpu)."),
    ] = None
    engine: Annotated[
        list[str] | None,
        typer.Option(help="Embedded engine KEY=VALUE, e.g. max_num_batched_tokens=4096."),
    ] = None
    vocab_size: Annotated[
        int | None, typer.Option(help="Target vocabulary size (token-id prompts).")
    ] = None
    tokenizer: Annotated[
        str | None, typer.Option(help="tokenizer.json or server URL for text prompts.")
    ] = None
    allow_overlong: Annotated[
        bool,
        typer.Option(
            "--allow-overlong", help="Send prompts longer than the server's context anyway."
        ),
    ] = False
    workers: Annotated[
        int | None,
        typer.Option(help="Client processes (default: as the planned token rate needs)."),
    ] = None
    ray: Annotated[
        str | None,
        typer.Option(help="Send from Ray actors: auto, a cluster address, or local."),
    ] = None
    ray_placement: Annotated[
        str | None,
        typer.Option(help="Ray actors one per CPU (cpu, the default) or one per node (node)."),
    ] = None

    def validate(self) -> None:
        """Every numeric flag within its bounds (``FLAG_BOUNDS``): one ``InputError`` naming
        the flag and the cap, before anything is planned, written or allocated."""
        for name, bound in FLAG_BOUNDS.items():
            flag, value = "--" + name.replace("_", "-"), getattr(self, name)
            if isinstance(value, str):  # a list left in by a command that runs one load
                raise InputError(flag, f"{value} is a sweep", "use prefillscope bench or sweep")
            bound.check(flag, value)

    def sweep_points(self) -> tuple[str, str] | None:
        """``(axis, "1,2,4")`` when ``--rate`` or ``--concurrency`` lists loads (the flag
        is cleared: each point sets it), else ``None``. Both listed: ``InputError``."""
        listed = [name for name in SWEEP_FLAGS if isinstance(getattr(self, name), str)]
        if len(listed) > 1:
            raise InputError("--concurrency", "sweep one axis at a time", "list only --rate")
        if not listed:
            return None
        text = getattr(self, listed[0])
        setattr(self, listed[0], None)
        return listed[0], text

    def workload_name(self) -> str:
        """The workload to build: ``--workload``; else what ``--dataset`` (or vLLM's
        ``--dataset-name``/``--dataset-path``) names; else vLLM's random lengths."""
        from prefillscope.bench_vocab import workload_name

        return workload_name(self)

    def overrides(self) -> dict[str, object]:
        """``load_spec`` overrides from ``--set`` and the common flags (flags win).

        ``--burstiness`` is vLLM's gamma shape (1: Poisson, below 1: burstier); given alone
        it implies ``--arrival gamma``, as in ``vllm bench serve``.
        """
        from prefillscope.bench_vocab import dataset_overrides
        from workloads.spec import parse_assignments

        overrides: dict[str, object] = dict(parse_assignments(self.set_ or []))
        given = {
            "num_requests": self.num_requests,
            "duration": self.duration,
            "rate": self.rate,
            "arrival": self.arrival,
            "burstiness": self.burstiness,
            "concurrency": self.concurrency,
            "seed": self.seed,
        }
        overrides.update({k: v for k, v in given.items() if v is not None})
        overrides.update(dataset_overrides(self, overrides))
        if self.burstiness is not None and self.arrival is None and "arrival" not in overrides:
            overrides["arrival"] = "gamma"
        return overrides

    def options(
        self, *, endpoint: str | None, out: Path | None, command: list[str]
    ) -> BenchOptions:
        """The validated ``BenchOptions`` of one run against ``endpoint`` (embedded if None)."""
        from prefillscope.bench_vocab import (
            engine_flags,
            gpu_telemetry,
            picked_percentiles,
            run_slo,
        )
        from session.bench_options import BenchOptions

        self.validate()
        telemetry = gpu_telemetry(self)
        engine = engine_flags(self, endpoint)
        if engine and endpoint:
            raise InputError("--engine", "configures the embedded engine only", "drop --endpoint")
        return BenchOptions(
            workload=self.workload_name(),
            overrides=self.overrides(),
            endpoint=endpoint,
            backend=self.backend,
            api=self.api,
            model=self.model,
            api_key=self.api_key or api_key_from_env(),
            vocab_size=self.vocab_size,
            tokenizer=self.tokenizer,
            engine=parse_engine_flags(engine) if engine else None,
            out=out,
            slo=run_slo(self),
            max_concurrency=self.max_concurrency,
            timeout_s=self.timeout,
            max_event_bytes=self.max_event_bytes,
            cache_protocol=self.cache_protocol,
            warmup=self.warmup,
            metrics_interval_s=self.metrics_interval,
            server_metrics=not self.no_server_metrics,
            mapping_file=self.mapping,
            prometheus=self.prometheus,
            gpu=telemetry,
            block_size=self.block_size,
            num_gpu_blocks=self.num_gpu_blocks,
            cache_model=str(parse_cache_model(self.cache_model)) if self.cache_model else None,
            allow_overlong=self.allow_overlong,
            percentiles=picked_percentiles(self),
            labels=_labels(self.label),
            command=command,
            workers=self.workers,
            ray=self.ray,
            ray_placement=self.ray_placement,
        )


def _labels(items: list[str] | None) -> dict[str, str]:
    from runfmt.runinfo import parse_labels

    return parse_labels(items or [])


def _flag_parameters() -> list[inspect.Parameter]:
    """``BenchFlags``' fields as keyword-only parameters, their annotations resolved."""
    hints = typing.get_type_hints(BenchFlags, include_extras=True)
    return [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if f.default is MISSING else f.default,
            annotation=hints[f.name],
        )
        for f in fields(BenchFlags)
    ]


def takes_bench_flags(command: Callable[..., R]) -> Callable[..., R]:
    """A typer command taking ``BenchFlags``' options before its own.

    ``command`` declares ``flags: BenchFlags`` and its own options; typer sees one flat
    signature (the shared options, then the command's), and ``command`` is called with
    the shared ones gathered into ``flags``.
    """
    own = inspect.signature(command, eval_str=True).parameters
    shared = _flag_parameters()
    names = [p.name for p in shared]
    clash = set(names) & set(own)
    if clash:
        raise TypeError(f"{command.__name__} redefines bench flags: {sorted(clash)}")
    extra = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for n, p in own.items() if n != "flags"]
    params = [*shared, *extra]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> R:
        flags = BenchFlags(**{name: kwargs.pop(name) for name in names})
        return command(flags=flags, **kwargs)

    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper
