"""What ``run.json`` records about a bench run: its target, plan, load and SLO before the
probes start (``run_info``), and each probe's settings and how it went
(``probe_settings``)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from probes.probe_process import ProbeProcess
from probes.sampling import ProbeStatus
from runfmt.codec import frozen_map
from runfmt.names import GPU_TABLE, SERVER_METRICS_TABLE
from runfmt.run_sections import (
    GpuProbe,
    LoadSection,
    PlanSection,
    ProbesSection,
    ProbeState,
    PrometheusProbe,
    ServerMetricsProbe,
)
from runfmt.run_workload import WorkloadSection
from runfmt.runinfo import RunInfo, started_clock
from runtime import redact
from runtime.clock import RunClock
from session.bench_oracle import MetricsMapping
from session.bench_plan import asked_rate, counts_by_kind, target_rate
from simengine.settings import EngineSettings

if TYPE_CHECKING:
    from loadgen.target import Target
    from probes.prometheus_source import PrometheusSource
    from session.bench_options import BenchOptions
    from simengine.engine_process import EngineProcess
    from workloads.plan import Plan
    from workloads.spec import WorkloadSpec


def probe_status(probes: ProbeProcess, name: str, off_reason: str) -> ProbeState:
    """A probe's status; ``off`` with the flag that turned it off when not running."""
    status = probes.statuses.get(name)
    if status is None:
        status = ProbeStatus(name)
        status.off(off_reason)
    return status.recorded()


def probe_settings(
    options: BenchOptions,
    probes: ProbeProcess,
    metrics: MetricsMapping,
    prometheus: PrometheusSource | None,
) -> ProbesSection:
    """``run.json["probes"]``: what each probe was set to and how it went."""
    server = probe_status(probes, SERVER_METRICS_TABLE, "--no-server-metrics")
    if metrics.error is not None and server.state != "off":
        server = replace(server, state="failed", reason=metrics.error)
    return ProbesSection(
        server_metrics=ServerMetricsProbe(
            url=probes.metrics_url,
            interval_s=options.metrics_interval_s,
            flavour=metrics.mapping.flavour if metrics.mapping is not None else None,
            mapping_file=str(metrics.file) if metrics.file is not None else None,
            status=server,
        ),
        gpu=GpuProbe(
            mode=options.gpu,
            interval_s=options.metrics_interval_s,
            status=probe_status(probes, GPU_TABLE, "--gpu-telemetry off"),
        ),
        prometheus=(
            PrometheusProbe(url=prometheus.url, status=prometheus.status.recorded())
            if prometheus is not None
            else None
        ),
    )


def run_info(
    options: BenchOptions,
    spec: WorkloadSpec,
    plan: Plan,
    target: Target,
    clock: RunClock,
    deadline_s: float | None,
    engine: EngineProcess | None = None,
) -> RunInfo:
    """``run.json`` as known before the probes start."""
    described = replace(target.describe(), embedded=engine is not None)
    if engine is not None:
        settings = (options.engine or EngineSettings.default()).describe()
        settings["kv_pool_blocks"] = engine.num_gpu_blocks
        described = replace(described, engine=frozen_map(settings))
    rate, unit = asked_rate(plan)
    return RunInfo(
        command=tuple(redact.argv(options.command, [options.api_key])),
        labels=frozen_map(options.labels),
        clock=started_clock(clock.wall_t0),
        target=described,
        workload=WorkloadSection.of(spec),
        seed_written=spec.seed,
        plan=PlanSection(
            requests=len(plan),
            warmup_requests=len(plan) - len(plan.measured),
            arrival=plan.arrival,
            concurrency=plan.concurrency,
            offered_rate_per_s=target_rate(plan),
            asked_rate=rate,
            asked_rate_unit=unit,
            by_kind=frozen_map(counts_by_kind(plan)),
        ),
        load=LoadSection(
            max_concurrency=options.max_concurrency,
            timeout_s=options.timeout_s,
            duration_s=deadline_s,
            warmup=options.warmup,
        ),
        slo=options.slo or None,
    )
