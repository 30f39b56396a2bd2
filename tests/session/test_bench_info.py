"""``session.bench_info``: what ``run.json`` records of a bench run before its probes
start, and each probe's settings; secrets never reach it."""

from __future__ import annotations

import json

from loadgen.target import Target
from probes.probe_process import ProbeProcess
from probes.sampling import ProbeStatus
from runfmt.codec import encode
from runfmt.rundir import RunDir
from runtime.clock import RunClock
from runtime.redact import MASK
from session.bench_info import probe_settings, run_info
from session.bench_options import BenchOptions
from session.bench_oracle import MetricsMapping
from workloads.build import build_plan
from workloads.spec import load_spec

SECRET = "sk-very-secret-key"


def test_run_info_records_the_plan_and_load_and_never_the_api_key():
    spec = load_spec("long-prompt", {"rate": 2.0, "num_requests": 5})
    plan = build_plan(spec)
    options = BenchOptions("long-prompt", api_key=SECRET, max_concurrency=4,
                           command=["prefillscope", "bench", "--api-key", SECRET])  # fmt: skip
    target = Target("http://127.0.0.1:9", "vllm", "completions", "m", api_key=SECRET)
    info = run_info(options, spec, plan, target, RunClock(), deadline_s=None).to_json()
    assert SECRET not in json.dumps(info)
    assert info["command"] == ["prefillscope", "bench", "--api-key", MASK]
    assert info["target"]["authenticated"] is True and info["target"]["embedded"] is False
    assert info["plan"]["requests"] == 5 and info["plan"]["by_kind"] == {"long-prompt": 5}
    assert (info["plan"]["asked_rate"], info["plan"]["asked_rate_unit"]) == (2.0, "req/s")
    assert info["load"]["max_concurrency"] == 4


def test_probes_not_started_are_off_with_the_flag_that_turned_them_off(tmp_path):
    probes = ProbeProcess(RunDir(tmp_path, create=True), RunClock(), metrics_url=None)
    settings = probe_settings(BenchOptions("x"), probes, MetricsMapping(None), None)
    assert settings.server_metrics is not None and settings.gpu is not None
    server, gpu = settings.server_metrics.status, settings.gpu.status
    assert (server.state, gpu.state) == ("off", "off")
    assert server.reason == "--no-server-metrics" and gpu.reason == "--gpu-telemetry off"
    assert settings.prometheus is None and settings.server_metrics.flavour is None
    assert encode(settings)["prometheus"] is None  # written null, as before


def test_an_unusable_mapping_file_fails_the_server_probe_with_its_reason(tmp_path):
    probes = ProbeProcess(RunDir(tmp_path, create=True), RunClock(), metrics_url="http://x/m")
    probes.statuses["server_metrics"] = ProbeStatus("server_metrics")  # started: pending
    bad = MetricsMapping(None, tmp_path / "m.toml", "m.toml: no [series] table")
    server = probe_settings(BenchOptions("x"), probes, bad, None).server_metrics
    assert server is not None and server.status.state == "failed"
    assert server.status.reason == "m.toml: no [series] table"
    assert server.mapping_file == str(tmp_path / "m.toml")
