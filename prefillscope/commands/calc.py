"""``prefillscope calc chunks|prefix|kv``: back-of-envelope numbers, from the engine's own rules.

Each sub-command prints a small table, or with ``--json`` one JSON object whose keys are
the contract (chunks → ``chunks``; prefix → ``reused_blocks`` … ``linear_flops``; kv →
``bytes_per_token``, ``total_bytes``, ``transfer_seconds``). Bad values exit 2 through
InputError; ``chunks`` exits 1 when running decodes leave prefill no budget at all, since
that is an answer ("it would wait"), not a usage mistake.

The arithmetic and rich are imported by the sub-command that runs, so the CLI starts
without them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer

from workloads.errors import InputError
from workloads.limits import MAX_CONCURRENCY, MAX_TOKENS, Bound

#: Chunks one ``calc chunks`` answer may list (more is a typo in --prompt or --budget).
MAX_CHUNKS = 10**6
_TOKENS = Bound(0, MAX_TOKENS, whole=True)
_SIZE = Bound(1, 1_000_000, whole=True)


def _check(**flags: tuple[float | int | None, Bound]) -> None:
    """Each ``name=(value, bound)`` checked under its flag ``--name``."""
    for name, (value, bound) in flags.items():
        bound.check("--" + name.replace("_", "-"), value)


if TYPE_CHECKING:
    from diagnose.arithmetic import KvTransfer

calc_app = typer.Typer(
    help=(
        "Back-of-envelope numbers: how a prompt is chunked, what a cached prefix saves, "
        "KV bytes to move."
    ),
    no_args_is_help=True,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _emit(as_json: bool, title: str, data: dict, rows: list[tuple[str, str]]) -> None:
    """One JSON object (the contract keys) or a two-column table of formatted figures."""
    if as_json:
        typer.echo(json.dumps(data))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=False)
    table.add_column("quantity", style="bold")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


@calc_app.command("chunks")
def chunks(
    budget: Annotated[int, typer.Option(help="max_num_batched_tokens (tokens per step).")],
    prompt: Annotated[int, typer.Option(help="Prompt length in tokens.")],
    decodes: Annotated[int, typer.Option(help="Running decodes (one token each per step).")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """How a prompt is sliced into prefill chunks next to running decodes."""
    from diagnose.arithmetic import prefill_chunks
    from perfmodel.chunking import PrefillBlocked

    _check(
        budget=(budget, Bound(1, MAX_TOKENS, whole=True)),
        prompt=(prompt, _TOKENS),
        decodes=(decodes, Bound(0, MAX_CONCURRENCY, whole=True)),
    )
    if budget > decodes and prompt / (budget - decodes) > MAX_CHUNKS:
        raise InputError(
            "--prompt", f"slices into more than {MAX_CHUNKS:,} chunks", "raise --budget"
        )

    try:
        sizes = prefill_chunks(prompt, budget, decodes)
    except PrefillBlocked as exc:
        print(f"prefillscope: prefill cannot progress: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
    data = {"chunks": sizes, "budget": budget, "decodes": decodes, "prompt": prompt}
    rows = [
        ("available per step", f"{budget - decodes:,}"),
        ("steps", f"{len(sizes):,}"),
        ("chunks", ", ".join(str(c) for c in sizes)),
    ]
    _emit(as_json, f"{prompt:,}-token prompt, budget {budget:,}, {decodes:,} decodes", data, rows)


@calc_app.command("prefix")
def prefix(
    prompt: Annotated[int, typer.Option(help="Prompt length in tokens.")],
    cached_prefix: Annotated[
        int, typer.Option(help="Tokens shared with a prompt already in the cache.")
    ],
    block_size: Annotated[int, typer.Option(help="KV block size in tokens.")] = 16,
    params: Annotated[
        float | None, typer.Option(help="Model parameters, for the linear FLOPs left (2·P·fresh).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """What a cached prefix saves: reused blocks, fresh tokens, attention pairs skipped."""
    from diagnose.arithmetic import prefix_reuse

    _check(
        prompt=(prompt, _TOKENS),
        cached_prefix=(cached_prefix, _TOKENS),
        block_size=(block_size, _SIZE),
        params=(params, Bound(0, 1e15, above=True)),
    )

    r = prefix_reuse(prompt, cached_prefix, block_size, params)
    rows = [
        ("reused blocks", f"{r.reused_blocks:,}"),
        ("cached tokens", f"{r.cached_tokens:,}"),
        ("fresh tokens", f"{r.fresh_tokens:,}"),
        ("pairs suffix→prefix", f"{r.pairs_suffix_prefix:,}"),
        ("pairs suffix→suffix", f"{r.pairs_suffix_suffix:,}"),
        ("pairs computed", f"{r.pairs_total:,}"),
        ("pairs without cache", f"{r.pairs_full:,}"),
        ("pairs skipped", f"{r.pairs_skipped:,} ({r.pairs_skipped / r.pairs_full:.1%})"),
    ]
    if r.linear_flops is not None:
        rows.append(("linear FLOPs (fresh)", f"{r.linear_flops:.4g}"))
    title = f"{prompt:,}-token prompt, {cached_prefix:,} shared, block {block_size}"
    _emit(as_json, title, asdict(r), rows)


@calc_app.command("kv")
def kv(
    tokens: Annotated[int, typer.Option(help="Tokens whose KV is transferred.")],
    layers: Annotated[int | None, typer.Option(help="Transformer layers.")] = None,
    kv_heads: Annotated[int | None, typer.Option(help="KV heads (after GQA).")] = None,
    head_dim: Annotated[int | None, typer.Option(help="Head dimension.")] = None,
    dtype: Annotated[str, typer.Option(help="KV dtype: fp32, bf16, fp16, fp8, int8.")] = "fp16",
    model: Annotated[
        str | None,
        typer.Option(help="A model preset or custom spec supplying layers/heads/head-dim."),
    ] = None,
    link_gbps: Annotated[
        float | None, typer.Option(help="Link speed in Gb/s, for the ideal transfer time.")
    ] = None,
    efficiency: Annotated[
        float, typer.Option(help="Protocol efficiency: the share of the line rate KV gets.")
    ] = 1.0,
    chunk: Annotated[
        int | None,
        typer.Option(help="Prefill chunk (tokens): each chunk's KV is sent as it is computed."),
    ] = None,
    chunk_ms: Annotated[
        float | None, typer.Option(help="Prefill time of one chunk (with --chunk).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """KV bytes per token and in total, and the time to ship them between workers.

    The ideal time is bytes over the line rate; ``--efficiency`` gives the effective
    time, and ``--chunk`` the time still exposed after the prefill when each chunk's KV
    is sent as soon as it is computed (``--chunk-ms`` apart) over the effective rate.
    """
    from diagnose.arithmetic import kv_transfer
    from perfmodel.config import flag_error
    from perfmodel.models import resolve_model
    from simengine.kv_link import LINK_BOUNDS

    _check(
        tokens=(tokens, _TOKENS),
        layers=(layers, _SIZE),
        kv_heads=(kv_heads, _SIZE),
        head_dim=(head_dim, _SIZE),
        link_gbps=(link_gbps, LINK_BOUNDS["--kv-link-gbps"].bound),  # the link's own bounds
        efficiency=(efficiency, LINK_BOUNDS["--kv-link-efficiency"].bound),
        chunk=(chunk, Bound(1, MAX_TOKENS, whole=True)),
        chunk_ms=(chunk_ms, Bound(0, 3.6e6, why="an hour")),
    )
    if chunk is not None and tokens / chunk > MAX_CHUNKS:
        raise InputError("--chunk", f"slices into more than {MAX_CHUNKS:,} chunks", "raise it")

    if model is not None:
        try:
            spec = resolve_model(model)
        except InputError as exc:
            raise flag_error(exc, {}) from None
        layers = spec.layers if layers is None else layers
        kv_heads = spec.kv_heads if kv_heads is None else kv_heads
        head_dim = spec.head_dim if head_dim is None else head_dim
    shape = {"--layers": layers, "--kv-heads": kv_heads, "--head-dim": head_dim}
    for flag, value in shape.items():
        if value is None:
            raise InputError(flag, "missing", f"give {flag} or --model")
    r = kv_transfer(layers, kv_heads, head_dim, dtype, tokens, link_gbps)
    data = {**asdict(r), **_pipelined(r, tokens, link_gbps, efficiency, chunk, chunk_ms)}
    rows = [
        ("bytes per token", f"{r.bytes_per_token:,} ({r.bytes_per_token / 1024:g} KiB)"),
        ("total bytes", f"{r.total_bytes:,} ({r.total_bytes / 2**20:,.1f} MiB)"),
    ]
    if r.transfer_seconds is not None:
        rows.append((f"ideal transfer at {link_gbps:g} Gb/s", f"{r.transfer_seconds * 1e3:.4f} ms"))
    if data["effective_transfer_seconds"] is not None and efficiency != 1.0:
        rows.append(
            (
                f"at {efficiency:.0%} efficiency",
                f"{data['effective_transfer_seconds'] * 1e3:.4f} ms",
            )
        )
    if data["pipelined_exposed_seconds"] is not None:
        rows.append(
            (
                f"exposed after prefill, {chunk:,}-token chunks",
                f"{data['pipelined_exposed_seconds'] * 1e3:.4f} ms",
            )
        )
    title = f"KV of {tokens:,} tokens: {layers} layers × {kv_heads} heads × {head_dim}, {dtype}"
    _emit(as_json, title, data, rows)


def _pipelined(
    r: KvTransfer,
    tokens: int,
    gbps: float | None,
    efficiency: float,
    chunk: int | None,
    chunk_ms: float,
) -> dict[str, float | int | None]:
    """The effective (protocol-efficiency) and pipelined (per-chunk) transfer figures."""
    from simengine.kv_link import LinkSpec, pipelined_exposed_s

    if not 0 < efficiency <= 1:
        raise InputError("--efficiency", f"must be in (0, 1], got {efficiency}")
    if chunk is not None and chunk <= 0:
        raise InputError("--chunk", f"must be a positive number of tokens, got {chunk}")
    if chunk is not None and (chunk_ms is None or chunk_ms < 0):
        raise InputError("--chunk-ms", "give the prefill time of one chunk (>= 0) with --chunk")
    out: dict[str, float | int | None] = {
        "efficiency": efficiency,
        "effective_transfer_seconds": None,
        "chunk_tokens": chunk,
        "pipelined_exposed_seconds": None,
    }
    if gbps is None:
        return out
    rate = LinkSpec(gbps, efficiency=efficiency).bytes_per_s
    per_token = r.bytes_per_token
    out["effective_transfer_seconds"] = tokens * per_token / rate
    if chunk is not None:
        full, rest = divmod(tokens, chunk)
        sizes = [chunk] * full + ([rest] if rest else [])
        out["pipelined_exposed_seconds"] = pipelined_exposed_s(
            [n * per_token for n in sizes], (chunk_ms or 0.0) / 1e3, rate
        )
    return out


def register(app: typer.Typer) -> None:
    app.add_typer(calc_app, name="calc")
