"""``prefillscope serve``: the embedded engine as an OpenAI-compatible server.

Flags carry vLLM's names (``--max-num-batched-tokens``, ``--enable-prefix-caching`` …) so a
launch line written for vLLM works here with the model and GPU swapped for presets. The
planting knobs (``--fixed-step-ms``, ``--host-overhead-ms``, ``--host-overhead-per-seq-us``)
let tests and demos put a known cause into the engine. With ``--json`` the resolved
configuration (URL, model, GPU, KV pool size) is printed as one JSON line once the server
listens, so a script can start it and read where it is.

The server (aiohttp, numpy) is imported when the command runs; the flags' defaults come
from ``EngineConfig`` alone, so the CLI starts without them.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from perfmodel.config import EngineConfig, flag_error
from prefillscope import kv_link_flags
from prefillscope.kv_link_flags import (
    KvLinkEfficiency,
    KvLinkGbps,
    KvLinkLatencyUs,
    KvLinkSharing,
    KvTransfer,
    KvTransferOverheadUs,
    disagg_config,
)
from workloads.errors import InputError
from workloads.limits import Bound

if TYPE_CHECKING:
    from simengine.server import EngineServer

_D = EngineConfig()
#: The config fields ``serve`` sets through flags of other names (the planted times, in
#: ms and µs); every other field is its vLLM flag, ``--`` and the field in dashes.
SERVE_FLAGS = {
    "fixed_step_s": "--fixed-step-ms",
    "host_overhead_step_s": "--host-overhead-ms",
    "host_overhead_per_seq_s": "--host-overhead-per-seq-us",
}


def resolved_config(server: EngineServer, url: str) -> dict[str, object]:
    """What the server actually runs with: the config plus the KV pool size it resolved."""
    info: dict[str, object] = {"url": url, **dataclasses.asdict(server.config)}
    info["served_model_name"] = server.served.name
    info["num_gpu_blocks"] = server.core.num_gpu_blocks
    info["stream_interval"] = server.options.stream_interval
    disagg = server.options.disagg
    if disagg is not None:
        info["disaggregate"] = disagg.describe()
    return info


def _ms(value: float | None, flag: str, per: float = 1e3) -> float | None:
    """A planted time in ms (µs with ``per=1e6``) as seconds, checked under its own flag."""
    if value is None:
        return None
    Bound(0, 3600 * per, why="an hour").check(flag, value)
    return value / per


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free port).")] = 8000,
    model: Annotated[str, typer.Option(help="Model preset or custom:… spec.")] = _D.model,
    gpu: Annotated[str, typer.Option(help="GPU preset the cost model times.")] = _D.gpu,
    tensor_parallel_size: Annotated[int, typer.Option()] = _D.tensor_parallel_size,
    block_size: Annotated[int, typer.Option(help="Tokens per KV block.")] = _D.block_size,
    num_gpu_blocks: Annotated[
        int | None, typer.Option(help="KV pool size in blocks (default: from GPU memory).")
    ] = None,
    gpu_memory_utilization: Annotated[float, typer.Option()] = _D.gpu_memory_utilization,
    max_num_batched_tokens: Annotated[
        int, typer.Option(help="Token budget of one step.")
    ] = _D.max_num_batched_tokens,
    max_num_seqs: Annotated[int, typer.Option()] = _D.max_num_seqs,
    max_model_len: Annotated[int, typer.Option()] = _D.max_model_len,
    enable_prefix_caching: Annotated[
        bool, typer.Option("--enable-prefix-caching/--no-enable-prefix-caching")
    ] = _D.enable_prefix_caching,
    enable_chunked_prefill: Annotated[
        bool, typer.Option("--enable-chunked-prefill/--no-enable-chunked-prefill")
    ] = _D.enable_chunked_prefill,
    stream_interval: Annotated[
        int, typer.Option(help="Tokens per streamed event after the first.")
    ] = 1,
    idle_timeout: Annotated[
        float,
        typer.Option(help="Close a connection idle this many seconds (vLLM: 5; 0: never)."),
    ] = 5.0,
    time_scale: Annotated[
        float, typer.Option(help="Wall seconds per modelled second (0.5: twice as fast).")
    ] = _D.time_scale,
    seed: Annotated[int, typer.Option()] = _D.seed,
    served_model_name: Annotated[
        str | None, typer.Option(help="Name clients use (default: --model).")
    ] = None,
    fixed_step_ms: Annotated[
        float | None, typer.Option(help="Plant a zero-cost model: every step takes this long.")
    ] = None,
    host_overhead_ms: Annotated[
        float, typer.Option(help="Plant scheduler overhead per step.")
    ] = 0.0,
    host_overhead_per_seq_us: Annotated[
        float, typer.Option(help="Plant scheduler overhead per running request per step.")
    ] = 0.0,
    cache_scope: Annotated[
        str,
        typer.Option(help="tenant: cache_salt and LoRA scope the cache; global: salts ignored."),
    ] = _D.cache_scope,
    lora_modules: Annotated[
        str, typer.Option(help="LoRA adapter names served besides the model, comma-separated.")
    ] = _D.lora_modules,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the resolved config as JSON once listening.")
    ] = False,
    disaggregate: Annotated[
        str | None,
        typer.Option(help="P:D prefill and decode workers (e.g. 1:1, 2:1); default: one engine."),
    ] = None,
    kv_link_gbps: KvLinkGbps = kv_link_flags.DEFAULT_GBPS,
    kv_link_latency_us: KvLinkLatencyUs = kv_link_flags.DEFAULT_LATENCY_US,
    kv_transfer_overhead_us: KvTransferOverheadUs = kv_link_flags.DEFAULT_OVERHEAD_US,
    kv_link_efficiency: KvLinkEfficiency = kv_link_flags.DEFAULT_EFFICIENCY,
    kv_link_sharing: KvLinkSharing = kv_link_flags.DEFAULT_SHARING,
    kv_transfer: KvTransfer = kv_link_flags.DEFAULT_TRANSFER,
    cache_model: Annotated[
        str, typer.Option(help="Prefix cache: blocks (vLLM), radix[:PAGE] (SGLang), slots:N.")
    ] = _D.cache_model,
    offload_gb: Annotated[
        float, typer.Option(help="CPU offload tier behind the block pool, GB (0: none).")
    ] = _D.offload_gb,
    offload_gbps: Annotated[
        float, typer.Option(help="Host link bandwidth loading offloaded blocks back, GB/s.")
    ] = _D.offload_gbps,
) -> None:
    """Serve the embedded engine (OpenAI-compatible, vLLM's metrics) until Ctrl-C.

    With ``--disaggregate P:D`` it serves P prefill and D decode workers joined by a
    modelled KV link (simengine.disagg) behind the same endpoint.
    """
    import asyncio

    from simengine.embedded import serve as serve_forever
    from simengine.server import ServerOptions
    from simengine.settings import check_disagg_cache

    if not 0 <= port <= 65535:
        raise InputError("--port", f"{port} is not a TCP port", "use 0..65535 (0: any free port)")
    Bound(1, 65_536, whole=True, why="tokens per streamed event").check(
        "--stream-interval", stream_interval
    )
    Bound(0, 3600, why="an idle connection is closed within the hour").check(
        "--idle-timeout", idle_timeout
    )
    # the link's bounds are checked with or without --disaggregate: a typo is a typo
    link = disagg_config(
        disaggregate or "1:1",
        kv_link_gbps,
        kv_link_latency_us,
        kv_transfer_overhead_us,
        kv_link_efficiency,
        kv_link_sharing,
        kv_transfer,
    )
    config = EngineConfig(
        model=model,
        gpu=gpu,
        tensor_parallel_size=tensor_parallel_size,
        block_size=block_size,
        num_gpu_blocks=num_gpu_blocks,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        enable_prefix_caching=enable_prefix_caching,
        enable_chunked_prefill=enable_chunked_prefill,
        time_scale=time_scale,
        fixed_step_s=_ms(fixed_step_ms, "--fixed-step-ms"),
        host_overhead_step_s=_ms(host_overhead_ms, "--host-overhead-ms") or 0.0,
        host_overhead_per_seq_s=_ms(host_overhead_per_seq_us, "--host-overhead-per-seq-us", 1e6)
        or 0.0,
        seed=seed,
        served_model_name=served_model_name,
        cache_scope=cache_scope,
        lora_modules=lora_modules,
        cache_model=cache_model,
        offload_gb=offload_gb,
        offload_gbps=offload_gbps,
    )
    try:
        config.validate()
    except InputError as exc:
        raise flag_error(exc, SERVE_FLAGS) from None
    check_disagg_cache(config, disaggregate is not None)
    disagg = link if disaggregate is not None else None

    def announce(server: EngineServer, url: str) -> None:
        info = resolved_config(server, url)
        if json_out:
            typer.echo(json.dumps(info))
        else:
            typer.echo(
                f"prefillscope serve: listening on {url} — {info['served_model_name']} "
                f"({config.model} on {config.gpu}), {info['num_gpu_blocks']} KV blocks "
                f"of {config.block_size} tokens"
            )
        sys.stdout.flush()

    options = ServerOptions(
        stream_interval=stream_interval, disagg=disagg, idle_timeout_s=idle_timeout or None
    )
    try:
        asyncio.run(serve_forever(config, options, host, port, announce))
    except KeyboardInterrupt:
        return
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise InputError(
                "--port", f"cannot listen on {host}:{port}: {exc.strerror}", "pick another"
            ) from None
        raise


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
