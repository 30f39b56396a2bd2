"""The embedded engine's configuration, named after vLLM's flags.

One dataclass carries everything the core, the cost model and the drivers need, so the
server, the virtual-time simulator and the tests build engines the same way. Every field
is validated here, once; an error names the field (``max_num_seqs``), and each command
line names it as its own flag (``flag_error``): ``serve --max-num-seqs``, ``bench --engine
max_num_seqs=…``, the planted ``serve --host-overhead-ms`` for ``host_overhead_step_s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perfmodel.models import resolve_gpu, resolve_model
from workloads.cache_model import parse_cache_model
from workloads.errors import InputError
from workloads.limits import (
    MAX_BLOCK_SIZE,
    MAX_CONCURRENCY,
    MAX_POOL_BLOCKS,
    MAX_SECONDS,
    MAX_TOKENS,
    MAX_VOCAB_SIZE,
    Bound,
)

#: ``EngineConfig.cache_scope``'s values: salts honoured, or ignored.
CACHE_SCOPES = ("tenant", "global")

#: The sampler's token layout needs the special and byte ids below word tokens.
MIN_VOCAB_SIZE = 512


#: Every numeric field's bounds (NaN never passes; a cap says why it is there).
_BOUNDS: dict[str, Bound] = {
    "tensor_parallel_size": Bound(1, 4096, whole=True),
    "block_size": Bound(1, MAX_BLOCK_SIZE, whole=True),
    "num_gpu_blocks": Bound(1, MAX_POOL_BLOCKS, whole=True, why="the pool keeps a table per block"),
    "max_num_seqs": Bound(1, MAX_CONCURRENCY, whole=True),
    "time_scale": Bound(0, 1e6, above=True),
    "seed": Bound(0, 2**63 - 1, whole=True),
    "vocab_size": Bound(MIN_VOCAB_SIZE, MAX_VOCAB_SIZE, whole=True, why="token ids are 32-bit"),
    **dict.fromkeys(("max_num_batched_tokens", "max_model_len"), Bound(1, MAX_TOKENS, whole=True)),
    "offload_gb": Bound(0, 1e6, why="a petabyte of host memory"),
    "offload_gbps": Bound(0, 1e6, above=True),
    **dict.fromkeys(
        ("gpu_memory_utilization", "prefill_mfu", "decode_mfu", "bandwidth_efficiency"),
        Bound(0, 1, above=True),
    ),
    **dict.fromkeys(
        (
            "fixed_step_s",
            "host_overhead_step_s",
            "host_overhead_per_seq_s",
            "host_overhead_per_request_s",
            "step_overhead_s",
            "layer_overhead_s",
        ),
        Bound(0, MAX_SECONDS),
    ),
}


@dataclass
class EngineConfig:
    """Everything that decides how the embedded engine schedules and times a step."""

    model: str = "llama-3.1-8b"
    gpu: str = "h100-sxm"
    tensor_parallel_size: int = 1
    block_size: int = 16
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float = 0.9
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    max_model_len: int = 32768
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    #: vLLM V1's async scheduling (the default of the versions the sim-to-real ground
    #: truth ran: 0.19's resolved config says ``async_scheduling: true``): the next step is
    #: scheduled while this one runs, so an arrival waits one step more. Honoured by the
    #: virtual-time driver (``simulate``); the embedded server schedules each step at once.
    async_scheduling: bool = False
    time_scale: float = 1.0
    fixed_step_s: float | None = None
    host_overhead_step_s: float = 0.0
    host_overhead_per_seq_s: float = 0.0
    #: Host seconds a request spends before the scheduler sees it and on its way back, once
    #: per request (an OpenAI server's HTTP handling, tokenization, hand-off to the engine
    #: and the first streamed event): it delays the request's TTFT and E2E, not the GPU.
    #: Honoured by the virtual-time driver (``simulate``); the embedded server's own
    #: frontend is real, so its real-time driver adds nothing.
    host_overhead_per_request_s: float = 0.0
    seed: int = 0
    vocab_size: int = 32000
    served_model_name: str | None = None
    prefill_mfu: float = 0.45
    decode_mfu: float = 0.30
    bandwidth_efficiency: float = 0.8
    step_overhead_s: float = 1e-4
    layer_overhead_s: float = 30e-6
    #: What scopes the prefix cache besides the model: ``tenant`` (a request's
    #: ``cache_salt`` and LoRA adapter, as vLLM) or ``global`` (salts ignored: a
    #: misconfigured deployment whose tenants share one cache; ``prefillscope isolation``).
    cache_scope: str = "tenant"
    #: LoRA adapters served besides the base model, comma-separated names (vLLM's
    #: ``--lora-modules``): a request naming one as its model is scoped by it.
    lora_modules: str = ""

    @property
    def lora_names(self) -> tuple[str, ...]:
        """The served LoRA adapters' names, in the order given."""
        return tuple(n.strip() for n in self.lora_modules.split(",") if n.strip())

    #: The prefix cache it keeps: ``blocks`` (vLLM), ``radix[:PAGE]`` (SGLang) or
    #: ``slots:N`` (llama.cpp), see ``workloads.cache_model``.
    cache_model: str = "blocks"
    #: A CPU offload tier behind the block pool (vLLM's CPU offloading): its size in GB
    #: (0: none) and the host link's bandwidth in GB/s, which times loading a hit back.
    offload_gb: float = 0.0
    offload_gbps: float = 25.0

    @property
    def model_name(self) -> str:
        """The name clients send and cache scopes carry."""
        return self.served_model_name or self.model

    def validate(self) -> None:
        """Raise InputError naming the first bad field and the fix."""
        for name, bound in _BOUNDS.items():
            bound.check(name, getattr(self, name))
        if parse_cache_model(self.cache_model, "cache_model").kind != "blocks" and self.offload_gb:
            raise InputError(
                "offload_gb",
                f"an offload tier backs the block pool, not {self.cache_model}",
                "use cache_model blocks with an offload tier",
            )
        model = resolve_model(self.model)
        resolve_gpu(self.gpu)
        if self.cache_scope not in CACHE_SCOPES:
            raise InputError(
                "cache_scope", f"unknown cache scope {self.cache_scope!r}", "use tenant or global"
            )
        if self.model_name in self.lora_names:
            raise InputError(
                "lora_modules",
                f"{self.model_name!r} is the base model's name",
                "name the adapters apart",
            )
        if model.q_heads % self.tensor_parallel_size:
            raise InputError(
                "tensor_parallel_size",
                f"{self.tensor_parallel_size} does not divide {model.name}'s "
                f"{model.q_heads} attention heads",
                "use a divisor of the head count",
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise InputError(
                "max_num_batched_tokens",
                f"{self.max_num_batched_tokens} is below max_num_seqs {self.max_num_seqs}",
                "every running sequence needs one token per step; raise the budget",
            )


def flag_error(exc: InputError, flags: Mapping[str, str]) -> InputError:
    """``exc`` (from ``EngineConfig.validate``, naming a field) as one command line's error:
    the field's flag from ``flags``, else ``--`` and the field in dashes (vLLM's names)."""
    flag = flags.get(exc.field, "--" + exc.field.replace("_", "-"))
    return InputError(flag, exc.problem, exc.fix)
