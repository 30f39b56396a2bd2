"""prefillscope's import-only stand-in for ``sgl_kernel`` (SGLang's compiled kernels).

SGLang 0.5.23's CPU engine imports a handful of ``sgl_kernel`` names at module import
time, and PyPI has no CPU build of that package (``sglang-kernel`` is a CUDA build that
needs ``libcuda.so.1``). Serving a BF16 Llama at tensor parallelism 1, without
speculative decoding or quantization, calls none of them: the server's own torch
fallbacks do the work, because this package registers no ``torch.ops.sgl_kernel.*``
(SGLang checks for those before it uses an optimised CPU kernel).

So every name here resolves at import and raises if it is ever called, with the op's
name and the server setting that needs it: nothing is computed silently in its place.
``targets/sglang-cpu.sh`` puts this folder on the server's ``PYTHONPATH``; it is no part
of prefillscope's own packages.

The two submodules SGLang imports inside ``try … except ImportError`` (``allreduce``,
``scalar_type``) raise ImportError on import, with the same kind of message, so SGLang
takes the fallback it already has for a missing kernel package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

__version__ = "0.0.0+prefillscope.standin"

#: Every function SGLang 0.5.23 imports from ``sgl_kernel`` on the CPU, with where it is
#: imported and the server setting under which it would be called.
OPS: dict[str, tuple[str, str]] = {
    "copy_all_layer_kv_cache_cpu": (
        "sglang/kernels/ops/kvcache/cache_move.py",
        "moving KV cache pages between layers (--enable-hierarchical-cache, KV offload)",
    ),
    "assign_req_to_token_pool_cpu": (
        "sglang/srt/mem_cache/allocation.py",
        "the CPU engine's optimised request-to-token map "
        "(SGLang uses its torch fallback when torch.ops.sgl_kernel is not registered)",
    ),
    "assign_draft_cache_locs_contiguous_cpu": (
        "sglang/kernels/ops/speculative/cache_locs.py",
        "speculative decoding (--speculative-algorithm)",
    ),
    "assign_extend_cache_locs_cpu": (
        "sglang/kernels/ops/speculative/cache_locs.py",
        "speculative decoding (--speculative-algorithm)",
    ),
    "build_tree_kernel_efficient_cpu": (
        "sglang/kernels/ops/speculative/spec_tree.py",
        "tree speculative decoding (--speculative-algorithm EAGLE/EAGLE3)",
    ),
    "verify_tree_greedy_cpu": (
        "sglang/kernels/ops/speculative/spec_tree.py",
        "tree speculative decoding (--speculative-algorithm EAGLE/EAGLE3)",
    ),
    "verify_tree_greedy": (
        "sglang/kernels/ops/speculative/spec_tree.py",
        "tree speculative decoding on a non-CUDA device (--speculative-algorithm)",
    ),
    "fill_accept_out_cache_loc_cpu": (
        "sglang/kernels/ops/speculative/eagle.py",
        "EAGLE speculative decoding (--speculative-algorithm EAGLE)",
    ),
    "fill_bonus_tokens_cpu": (
        "sglang/kernels/ops/speculative/eagle.py",
        "EAGLE speculative decoding (--speculative-algorithm EAGLE)",
    ),
}


class StandInKernelError(NotImplementedError):
    """A stand-in kernel was called: the server runs a setting this stand-in cannot serve."""


def missing(name: str, where: str, setting: str) -> Callable[..., NoReturn]:
    """A function named ``name`` that raises :class:`StandInKernelError` when called."""

    def kernel(*args: object, **kwargs: object) -> NoReturn:
        raise StandInKernelError(
            f"sgl_kernel.{name} was called (imported by {where}), but this is prefillscope's "
            f"import-only stand-in for sgl_kernel, which computes nothing: it is needed by "
            f"{setting}. Serve without that setting, or install a real CPU build of "
            f"sgl-kernel in place of targets/sgl_kernel_standin."
        )

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = f"Stand-in for sgl_kernel.{name}: raises when called ({setting})."
    return kernel


for _name, (_where, _setting) in OPS.items():
    globals()[_name] = missing(_name, _where, _setting)

__all__ = sorted(OPS)
