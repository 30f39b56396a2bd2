"""An inference-perf run in its lifecycle-metrics layout, read as a replayable experiment.

The folder holds ``results/*_lifecycle_metrics.json`` (what was measured, in seconds),
``results/config.yaml`` (the client configuration inference-perf resolved and ran),
``profile.yaml`` (the one it was asked for) and the server's ``exp-config.yaml`` (model,
tensor and data parallelism, ``max_num_batched_tokens``, ``max_num_seqs``, ``max_model_len``).

Which file the workload follows, and why:

* **Prompts** follow ``results/config.yaml`` (read by ``session.lifecycle_prompts``):
  ``num_groups`` × ``num_prompts_per_group`` single-turn prompts, each a group's shared
  system prompt and a question of its own, with the lengths it gives (numbers or
  distributions). ``profile.yaml`` may ask for multi-turn chat over other counts, but the
  measured prompt lengths do not grow across the run (they would, turn after turn), so
  the resolved configuration is what ran. Requests cycle through the prompts (shuffled
  once, each stage from the first of them, as inference-perf sends them), so a prompt
  recurs and the prefix cache (on by default in vLLM's V1 engine) sees it again.
  The prompts are as long as the *measured* mean ``prompt_len`` on average: the chat
  template adds tokens the configuration does not count, and they are put after the
  question.
* **Arrivals, stages and the timeout** follow ``results/config.yaml``'s ``load`` as
  inference-perf's load generator sends them (read by ``session.lifecycle_load``): random
  gaps even under ``constant``, each stage once the one before it drained, the client's
  timeout (300 s unless ``request_timeout`` says).
* **The server** is ``exp-config.yaml``'s; a ``vllm`` server (``server.type``) is
  simulated with vLLM V1's asynchronous scheduling (``EngineConfig.async_scheduling``)
  and its OpenAI frontend's time per request (``VLLM_FRONTEND_S``, below).

Measured figures are turned into per-token ones: TPOT ``× (k·n − 1)/(n − 1)`` (n the
output length; exact per request, so for every quantile), ITL mean likewise, and an ITL
quantile q from the client's quantile ``1 − (1 − q)/k`` (the k − 1 extra gaps per token
are near zero and sit below every real one); a quantile the file does not hold (ITL p99
needs the client's p99.5) is ``None``. TTFT and E2E are the client's, as measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel.config import EngineConfig
from runfmt.metrics import E2E, ITL, TPOT, TTFT
from session.lifecycle_load import Stage, read_load
from session.lifecycle_prompts import SharedPrefixPlan, read_prompts
from session.lifecycle_values import real
from workloads.errors import InputError

#: Statistics the scoreboard compares, as inference-perf names them.
LIFECYCLE_STATS = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}
_CLIENT_LEVELS = {"p50": "median", "p75": "p75", "p90": "p90", "p95": "p95", "p99": "p99",
                  "p99.9": "p99.9"}  # fmt: skip
#: inference-perf's names of the four latencies.
_LATENCY_KEYS = {
    TTFT.key: "time_to_first_token",
    ITL.key: "inter_token_latency",
    TPOT.key: "time_per_output_token",
    E2E.key: "request_latency",
}
#: The whole run's figures, under the stage index inference-perf's peers use for it.
WHOLE_RUN = -1

#: Seconds of a request's TTFT that vLLM's steps do not account for, once per request:
#: the OpenAI server's HTTP handling, tokenization and hand-off to the engine core, and the
#: first token's way back (detokenized, streamed, parsed by the client). No datasheet
#: gives it, so it is read from measurements without any cost model: at a run's lightest
#: stage a prompt the prefix cache already holds costs about one step, and an arrival
#: under asynchronous scheduling waits half a step and the step scheduled ahead of it, so
#: ``TTFT − 2.5 · ITL`` (both measured means) is what the frontend adds. Over the 12
#: inference-perf runs on an H100 that are not overloaded (Llama-2-7B TP1, CodeLlama-34B
#: TP2, Llama-2-70B TP4, Mixtral-8x7B TP2; three workloads each) it is 6.7–7.0 ms
#: (7B), 8.4–9.6 (34B), 9.9–10.8 (70B) and 14.5–17.9 (Mixtral); the median, 9.75 ms, is
#: used for every model (leaving each model's runs out moves it 9.26–10.11 ms). It is an
#: estimate of one study's hosts and client, not a property of the model: a different
#: host or client is given its own figure with ``host_overhead_per_request_s``.
VLLM_FRONTEND_S = 0.00975


@dataclass
class LifecycleRun:
    """What a lifecycle-metrics folder says: the server, the workload and the measurements."""

    path: Path
    model: str
    tensor_parallel_size: int
    #: The server's chunk budget (0: ``exp-config.yaml`` does not say; ``engine`` then
    #: needs it given).
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    #: The prompts the client sent (``session.lifecycle_prompts``).
    prompts: SharedPrefixPlan
    stages: list[Stage]
    arrivals: str
    timeout_s: float
    #: Mean prompt length measured by the client (template tokens included).
    prompt_len: float
    #: stage index (``WHOLE_RUN`` for the summary) → metric → statistic → seconds.
    actual: dict[int, dict[str, dict[str, float | None]]] = field(default_factory=dict)
    #: Tokens the client counted per token the server streamed (see the docstring).
    client_tokens_per_token: int = 1
    #: ``server.type`` of the client configuration.
    server_type: str = ""
    #: The server schedules asynchronously (vLLM V1's default: a ``vllm`` server).
    async_scheduling: bool = False
    #: The server's frontend seconds per request (``VLLM_FRONTEND_S`` for ``vllm``).
    frontend_s: float = 0.0
    #: Engine replicas behind the endpoint (vLLM's ``data_parallel_size``), each with
    #: ``tensor_parallel_size`` GPUs, its own scheduler and its own prefix cache.
    data_parallel_size: int = 1
    #: ``load.interval``: the client's pause between a stage's end and the next stage.
    stage_interval_s: float = 1.0
    #: ``gpu_memory_utilization`` and ``enable_prefix_caching`` where ``exp-config.yaml``
    #: records them (None: the engine's own, vLLM's defaults 0.9 and on).
    gpu_memory_utilization: float | None = None
    enable_prefix_caching: bool | None = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def output_len(self) -> int:
        """The requested output length, on average over the prompts (each prompt's own
        where the configuration gives a distribution)."""
        return max(1, round(self.prompts.output_len.mean))

    def engine(self, base: EngineConfig, given: Collection[str] = ()) -> EngineConfig:
        """``base`` with this run's model and server limits, but for the fields named in
        ``given`` (``--engine`` settings, which win over what the run recorded: a model's
        ``config.json`` for an id no preset knows)."""
        import dataclasses

        recorded = {
            "model": self.model,
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "max_model_len": self.max_model_len,
        }
        if not self.max_num_batched_tokens and "max_num_batched_tokens" not in given:
            raise InputError(
                "--engine max_num_batched_tokens",
                f"{self.path / 'exp-config.yaml'} does not record the server's chunk budget",
                "give it: --engine max_num_batched_tokens=N",
            )
        optional = {
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enable_prefix_caching": self.enable_prefix_caching,
        }
        recorded |= {k: v for k, v in optional.items() if v is not None}
        config = dataclasses.replace(
            base,
            **{k: v for k, v in recorded.items() if k not in given},
            async_scheduling=base.async_scheduling or self.async_scheduling,
            host_overhead_per_request_s=base.host_overhead_per_request_s or self.frontend_s,
        )
        # a step schedules at most its budget's sequences
        seqs = min(config.max_num_seqs, config.max_num_batched_tokens)
        return dataclasses.replace(config, max_num_seqs=seqs)


def _load_yaml(path: Path, flag: str) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(flag, f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(flag, f"{path} is not a mapping")
    return data


def _need(mapping: dict[str, Any], key: str, where: Path, flag: str) -> Any:
    value = mapping.get(key) if isinstance(mapping, dict) else None
    if value is None:
        raise InputError(flag, f"{where} has no {key}", "give an inference-perf results folder")
    return value


#: Each server setting an ``exp-config.yaml`` may record, under the names it may give it
#: (the study's own, vLLM's engine argument, its command-line flag), and what it may be.
_SERVER_SETTINGS: dict[str, tuple[tuple[str, ...], str]] = {
    "tensor_parallel_size": (
        ("tensor_parallelism", "tensor_parallel_size", "tensor-parallel-size"),
        "count",
    ),
    "data_parallel_size": (
        ("data_parallelism", "data_parallel_size", "data-parallel-size"),
        "count",
    ),
    "max_num_batched_tokens": (("max_num_batched_tokens", "max-num-batched-tokens"), "count"),
    "max_num_seqs": (("max_num_seqs", "max-num-seqs"), "count"),
    "max_model_len": (("max_model_len", "max-model-len"), "count"),
    "gpu_memory_utilization": (("gpu_memory_utilization", "gpu-memory-utilization"), "fraction"),
    "enable_prefix_caching": (("enable_prefix_caching", "enable-prefix-caching"), "switch"),
}


def _read_json(path: Path, flag: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(flag, f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(flag, f"{path} is not a JSON object")
    return data


#: What each kind of setting may be, and the fix that says so.
_KINDS = {
    "count": (lambda v: real(v) and isinstance(v, int) and v > 0, "a positive whole number"),
    "fraction": (lambda v: real(v) and 0 < v <= 1, "a fraction above 0 and at most 1"),
    "switch": (lambda v: isinstance(v, bool), "true or false"),
}


def _server_setting(server: dict[str, Any], name: str, where: Path, flag: str) -> Any:
    """The setting ``name`` under the first of its spellings that ``server`` gives (None:
    it gives none); ``InputError`` naming ``flag`` when it is not what its kind may be."""
    spellings, kind = _SERVER_SETTINGS[name]
    key = next((k for k in spellings if server.get(k) is not None), None)
    if key is None:
        return None
    value = server[key]
    allowed, fix = _KINDS[kind]
    if not allowed(value):
        raise InputError(flag, f"{where}: {key} is {value!r}", fix)
    return float(value) if kind == "fraction" else value


def read_lifecycle(path: Path, flag: str = "--against") -> LifecycleRun:
    """The run in ``path`` (an inference-perf lifecycle-metrics folder); ``InputError``
    naming ``flag`` when a file it needs is missing or malformed."""
    path = Path(path)
    results = path / "results"
    server_file = path / "exp-config.yaml"
    client_file = results / "config.yaml"
    for needed in (server_file, client_file, results / "summary_lifecycle_metrics.json"):
        if not needed.is_file():
            raise InputError(flag, f"{path} lacks {needed.relative_to(path)}",
                             "give a folder with results/*_lifecycle_metrics.json, "
                             "results/config.yaml and exp-config.yaml")  # fmt: skip
    server = _load_yaml(server_file, flag)
    client = _load_yaml(client_file, flag)
    prompts = read_prompts(client, client_file, flag)
    raw = {WHOLE_RUN: _read_json(results / "summary_lifecycle_metrics.json", flag)}
    while (file := results / f"stage_{len(raw) - 1}_lifecycle_metrics.json").is_file():
        raw[len(raw) - 1] = _read_json(file, flag)
    load = read_load(client, {k: v for k, v in raw.items() if k != WHOLE_RUN}, client_file, flag)
    raw = {k: v for k, v in raw.items() if k < len(load.stages)}
    summary = raw[WHOLE_RUN].get("successes") or {}
    # the client's count (template tokens included); newer clients name it prompt_tokens
    measured = summary.get("prompt_len") or summary.get("prompt_tokens") or {}
    prompt_len = float(measured.get("mean") or 0.0) if isinstance(measured, dict) else 0.0
    server_type = str((client.get("server") or {}).get("type") or "")

    def setting(name: str) -> Any:
        return _server_setting(server, name, server_file, flag)

    run = LifecycleRun(
        path=path,
        model=str(_need(server, "model", server_file, flag)),
        tensor_parallel_size=setting("tensor_parallel_size") or 1,
        data_parallel_size=setting("data_parallel_size") or 1,
        gpu_memory_utilization=setting("gpu_memory_utilization"),
        enable_prefix_caching=setting("enable_prefix_caching"),
        max_num_batched_tokens=setting("max_num_batched_tokens") or 0,
        max_num_seqs=setting("max_num_seqs") or 256,
        max_model_len=setting("max_model_len") or 32768,
        prompts=prompts,
        stages=list(load.stages),
        stage_interval_s=load.interval_s,
        arrivals=load.arrivals,
        timeout_s=load.timeout_s,
        prompt_len=max(prompt_len, prompts.mean_len),
        server_type=server_type,
        async_scheduling=server_type == "vllm",
        frontend_s=VLLM_FRONTEND_S if server_type == "vllm" else 0.0,
    )
    run.client_tokens_per_token = _client_factor(summary, run.output_len)
    run.actual = {i: _actual(d, run) for i, d in raw.items()}
    return run


def _client_factor(successes: dict[str, Any], output_len: int) -> int:
    """How many tokens the client counted per streamed token (see the module docstring)."""
    latency = successes.get("latency") or {}
    try:
        stream = latency["request_latency"]["mean"] - latency["time_to_first_token"]["mean"]
        tpot = latency["time_per_output_token"]["mean"]
    except (KeyError, TypeError):
        return 1
    if not tpot or tpot <= 0 or output_len <= 1:
        return 1
    counted = stream / tpot + 1
    return max(1, round(counted / output_len))


def _actual(data: dict[str, Any], run: LifecycleRun) -> dict[str, dict[str, float | None]]:
    """One lifecycle file's latencies per token, in seconds (the module docstring's rules)."""
    latency = (data.get("successes") or {}).get("latency") or {}
    k, n = run.client_tokens_per_token, run.output_len
    per_token = (k * n - 1) / (n - 1) if n > 1 else 1.0
    out: dict[str, dict[str, float | None]] = {}
    for metric, key in _LATENCY_KEYS.items():
        stats = latency.get(key) or {}
        figures: dict[str, float | None] = {}
        for stat, name in LIFECYCLE_STATS.items():
            value = stats.get(name)
            if metric == ITL.key and stat != "mean":
                level = 100 - (100 - float(stat[1:])) / k
                name = next((v for s, v in _CLIENT_LEVELS.items() if float(s[1:]) == level), None)
                value = stats.get(name) if name else None
            elif metric in (ITL.key, TPOT.key) and value is not None:
                value *= per_token
            figures[stat] = None if value is None or not math.isfinite(value) else float(value)
        out[metric] = figures
    out["failures"] = {"count": float((data.get("failures") or {}).get("count") or 0)}
    out["successes"] = {"count": float((data.get("successes") or {}).get("count") or 0)}
    return out
