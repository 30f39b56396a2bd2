"""The lesson's arithmetic: chunk slicing, prefix-reuse savings, KV transfer size.

These are the back-of-the-envelope figures a diagnosis quotes ("a 4096-token prompt takes
five steps at budget 1024", "the cached prefix skips 69 % of attention"). Each one reuses
the engine's own rule rather than restating it: chunk slicing is the scheduler's
``chunk_schedule``, attended pairs are the cost model's ``attended_pairs``, KV bytes per
token is the model presets' formula, and the prefix hit follows the pool's rules (full
blocks only, capped at ``num_tokens - 1``).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.chunking import chunk_schedule
from perfmodel.costmodel import attended_pairs
from perfmodel.models import dtype_bytes, kv_bytes_per_token
from workloads.errors import InputError


def _check_positive(field: str, value: float) -> None:
    if value <= 0:
        raise InputError(field, f"must be > 0, got {value}")


def prefill_chunks(prompt_tokens: int, budget: int, decodes: int) -> list[int]:
    """How a prompt is chunked while ``decodes`` sequences keep decoding.

    Raises ``perfmodel.chunking.PrefillBlocked`` when the decodes take the whole budget.
    """
    _check_positive("--prompt", prompt_tokens)
    _check_positive("--budget", budget)
    if decodes < 0:
        raise InputError("--decodes", f"must be >= 0, got {decodes}")
    return chunk_schedule(prompt_tokens, budget, decodes)


@dataclass(frozen=True)
class PrefixReuse:
    """What a cached prefix saves a prompt: blocks reused, tokens and attention pairs skipped."""

    reused_blocks: int
    cached_tokens: int
    fresh_tokens: int
    pairs_suffix_prefix: int
    pairs_suffix_suffix: int
    pairs_total: int
    pairs_full: int
    pairs_skipped: int
    linear_flops: float | None


def prefix_reuse(
    prompt_tokens: int, cached_prefix: int, block_size: int, params: float | None = None
) -> PrefixReuse:
    """Prefix reuse for a prompt sharing ``cached_prefix`` tokens with a cached one.

    Only full blocks are reused and the last prompt token is always recomputed, so the hit
    is ``min(cached_prefix, prompt - 1)`` rounded down to a block. The fresh suffix attends
    to the cached prefix (``fresh · cached`` pairs) and causally to itself.
    """
    _check_positive("--prompt", prompt_tokens)
    _check_positive("--block-size", block_size)
    if cached_prefix < 0:
        raise InputError("--cached-prefix", f"must be >= 0, got {cached_prefix}")
    if params is not None:
        _check_positive("--params", params)
    blocks = min(cached_prefix, prompt_tokens - 1) // block_size
    cached = blocks * block_size
    fresh = prompt_tokens - cached
    total = attended_pairs(fresh, cached)
    full = attended_pairs(prompt_tokens, 0)
    suffix_prefix = fresh * cached
    return PrefixReuse(
        reused_blocks=blocks,
        cached_tokens=cached,
        fresh_tokens=fresh,
        pairs_suffix_prefix=suffix_prefix,
        pairs_suffix_suffix=total - suffix_prefix,
        pairs_total=total,
        pairs_full=full,
        pairs_skipped=full - total,
        linear_flops=None if params is None else 2.0 * params * fresh,
    )


@dataclass(frozen=True)
class KvTransfer:
    """The KV a disaggregated prefill worker ships to a decode worker."""

    bytes_per_token: int
    total_bytes: int
    transfer_seconds: float | None


def kv_transfer(
    layers: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    tokens: int,
    link_gbps: float | None = None,
) -> KvTransfer:
    """KV bytes for ``tokens`` tokens and the ideal time to send them over a link in Gb/s."""
    for field, value in (
        ("--layers", layers),
        ("--kv-heads", kv_heads),
        ("--head-dim", head_dim),
        ("--tokens", tokens),
    ):
        _check_positive(field, value)
    if link_gbps is not None:
        _check_positive("--link-gbps", link_gbps)
    per_token = kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes(dtype, "--dtype"))
    total = per_token * tokens
    seconds = None if link_gbps is None else total * 8 / (link_gbps * 1e9)
    return KvTransfer(per_token, total, seconds)
