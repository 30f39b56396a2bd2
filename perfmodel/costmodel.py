"""Roofline step timing: how long one scheduler step takes on a named GPU and model.

A step runs two kinds of kernel one after the other, layer by layer: the linear layers
(one GEMM over all its tokens) and attention (one kernel over all its sequences). Each
is bound by whichever is slower, its arithmetic or its memory traffic:

    step = max(linear FLOPs / (peak · mfu), weight bytes / (bandwidth · efficiency))
           + max(attention FLOPs / (peak · mfu), KV bytes / (bandwidth · efficiency))
           + per-step overhead + per-layer overhead · layers + host overhead

A roofline over the whole step (the larger of all FLOPs and all bytes) would let
attention's KV reads hide under the GEMMs' arithmetic, which they cannot: the kernels do
not overlap. It matters for large decode batches at long context, where the GEMMs are
compute-bound and attention bandwidth-bound (128 sequences of CodeLlama-34B at ~1,800
tokens on two H100s: 14.4 ms of GEMM arithmetic, 12.5 ms of weights, 8.5 ms of KV reads;
22.9 ms where the whole-step roofline said 20.9).

FLOPs are ``2 · active params`` per token for the linear layers plus ``4 · layers ·
q_heads · head_dim`` per attended query-key pair. Prefill and decode tokens run at
different efficiencies (large matmuls vs. skinny ones), so a mixed step adds the two
compute times. Bytes are the weights (read once per step), the KV context every scheduled
sequence reads and the KV the step writes.

**Embedding and LM head** (where the model's vocabulary is known): the token embedding
is a lookup, so a token's linear FLOPs leave it out, and a step reads only its tokens'
rows of it, not the table; the LM head multiplies only the positions whose logits the
step samples, one per scheduled sequence (vLLM computes the logits of each sequence's
last scheduled token), as a skinny matmul at the decode efficiency. For Llama-3.1-8B
(vocabulary 128,256) that is 13 % fewer FLOPs per prefill token and 6.5 % fewer bytes per
step than counting every parameter per token; a tied head (the embedding matrix itself)
is read by the head, so nothing is saved on bytes. Under tensor parallelism each GPU does 1/tp
of the FLOPs and holds 1/tp of the weights and KV heads; the step time is one GPU's.

**Mixture of experts** (Mixtral, Qwen3 MoE): a token multiplies by its active
parameters (the shared layers and ``experts_per_token`` of ``experts`` MLPs), and a step
reads the shared weights and every expert at least one of its tokens was routed to. With
routing uniform and independent, n tokens touch ``experts · (1 − (1 − k/experts)^n)``
experts of a layer on average: one decode reads k experts, a batch of 64 Mixtral tokens
all 8. A dense model reads all its weights whatever n.

**Tensor parallelism** adds two all-reduces per layer (after attention and after the
MLP) of the step's activations, ``tokens · hidden · dtype bytes`` each, over the GPUs'
link: a ring all-reduce moves ``2 (tp − 1)/tp`` of that through each GPU's link, plus the
link's small-message latency (``GpuSpec.link_bandwidth``, ``link_latency_s``), not
overlapped with compute (vLLM's all-reduce sits between the layers' matmuls).

Costing a step from a handful of aggregates (not per token) keeps the engine fast enough
to serve hundreds of streams in real time and to simulate millions of tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfmodel.config import EngineConfig
from perfmodel.models import GpuSpec, ModelSpec, resolve_gpu, resolve_model
from workloads.errors import InputError


def attended_pairs(new_tokens: int, context: int) -> int:
    """Query-key pairs causal attention evaluates for ``new_tokens`` after ``context`` tokens.

    Each new token attends to the whole cached context and to itself and the new tokens
    before it: ``c · p + c (c + 1) / 2``. A decode token at context L attends L + 1.
    """
    return new_tokens * context + new_tokens * (new_tokens + 1) // 2


@dataclass(slots=True)
class StepShape:
    """What a step computes, aggregated over its sequences (the scheduler fills it in).

    ``*_context`` is the number of already-cached tokens the scheduled sequences read
    (``p`` of each prefill chunk, ``L`` of each decode).
    """

    prefill_tokens: int = 0
    prefill_pairs: int = 0
    prefill_context: int = 0
    decode_tokens: int = 0
    decode_context: int = 0
    num_running: int = 0

    @property
    def decode_pairs(self) -> int:
        return self.decode_context + self.decode_tokens


@dataclass(frozen=True)
class StepCost:
    """A step's modelled time and the terms it came from (what diagnosis explains ITL with)."""

    duration_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    flops: float
    bytes: float
    bound: str  # "compute" | "bandwidth" | "fixed"
    #: Tensor parallelism's all-reduces (0 on one GPU).
    comm_s: float = 0.0


class CostModel:
    """Times scheduler steps for one model on one GPU (per GPU of a tensor-parallel group)."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, config: EngineConfig) -> None:
        self.model = model
        self.gpu = gpu
        self.config = config
        tp = config.tensor_parallel_size
        self.tp = tp
        self.weight_bytes_per_gpu = model.weight_bytes / tp
        self.kv_bytes_per_token = model.kv_bytes_per_token(tp)
        #: Weights every step reads, and those of all experts (read as routing touches them).
        gathered = model.params - model.streamed_params  # an untied embedding's table
        self.dense_bytes_per_gpu = (model.dense_params - gathered) * model.dtype_bytes / tp
        #: What a step that touches every expert reads (``weight_bytes_per_gpu`` is held).
        self.streamed_bytes_per_gpu = model.streamed_params * model.dtype_bytes / tp
        self.expert_bytes_per_gpu = model.expert_params * model.dtype_bytes / tp
        self._untouched = 1 - model.experts_per_token / model.experts if model.experts else 0.0
        #: Per step: 2 all-reduces per layer, each a latency and bytes per token through the link.
        allreduces = 2 * model.layers if tp > 1 else 0
        self._comm_fixed_s = allreduces * gpu.link_latency_s
        self._comm_s_per_token = (
            allreduces * 2 * (tp - 1) / tp * model.hidden * model.dtype_bytes / gpu.link_bandwidth
        )
        self._linear_flops_per_token = 2.0 * model.body_params / tp
        self._head_flops_per_row = 2.0 * model.head_params / tp
        self._attn_flops_per_pair = 4.0 * model.layers * model.q_heads * model.head_dim / tp
        self._prefill_flops_rate = gpu.peak_flops * config.prefill_mfu
        self._decode_flops_rate = gpu.peak_flops * config.decode_mfu
        self._byte_rate = gpu.bandwidth * config.bandwidth_efficiency
        self._fixed_overhead = (
            config.step_overhead_s
            + config.layer_overhead_s * model.layers
            + config.host_overhead_step_s
        )
        self._per_seq_overhead = config.host_overhead_per_seq_s

    @classmethod
    def from_config(cls, config: EngineConfig) -> CostModel:
        return cls(resolve_model(config.model), resolve_gpu(config.gpu), config)

    # -- capacity ------------------------------------------------------------------------
    def kv_pool_blocks(self, block_size: int) -> int:
        """Blocks that fit in ``memory × utilization − weights`` on one GPU."""
        free = self.gpu.memory_bytes * self.config.gpu_memory_utilization
        free -= self.weight_bytes_per_gpu
        blocks = int(free // (self.kv_bytes_per_token * block_size))
        if blocks <= 0:
            raise InputError(
                "model",
                f"{self.model.name} weights ({self.weight_bytes_per_gpu / 2**30:.1f} GiB per GPU) "
                f"leave no KV cache room on {self.gpu.name}",
                "raise tensor_parallel_size, pick a larger gpu or give num_gpu_blocks",
            )
        return blocks

    # -- step timing ---------------------------------------------------------------------
    def breakdown(self, shape: StepShape) -> StepCost:
        """The full cost of a step: each roofline term, the overheads and which bound won."""
        prefill_flops, decode_flops, compute_s, nbytes, memory_s, comm_s, overhead, roofline_s = (
            self._terms(shape)
        )
        fixed = self.config.fixed_step_s
        if fixed is not None:
            return StepCost(
                fixed, compute_s, memory_s, 0.0, prefill_flops + decode_flops, nbytes, "fixed"
            )
        bound = "compute" if compute_s >= memory_s else "bandwidth"
        return StepCost(
            duration_s=roofline_s + comm_s + overhead,
            compute_s=compute_s,
            memory_s=memory_s,
            overhead_s=overhead,
            flops=prefill_flops + decode_flops,
            bytes=nbytes,
            bound=bound,
            comm_s=comm_s,
        )

    def _terms(self, shape: StepShape) -> tuple[float, ...]:
        """A step's prefill and decode FLOPs, compute seconds, bytes, memory seconds,
        all-reduce seconds, overhead and roofline seconds (each kernel kind's bound, added):
        what ``breakdown`` and ``step_time`` add up."""
        overhead = self._fixed_overhead + self._per_seq_overhead * shape.num_running
        tokens = shape.prefill_tokens + shape.decode_tokens
        # the linear layers: every token through the layers, one row per sequence through the head
        prefill_linear = self._linear_flops_per_token * shape.prefill_tokens
        decode_linear = (
            self._linear_flops_per_token * shape.decode_tokens
            + self._head_flops_per_row * min(tokens, max(shape.num_running, 1))
        )
        prefill_attn = self._attn_flops_per_pair * shape.prefill_pairs
        decode_attn = self._attn_flops_per_pair * shape.decode_pairs
        prefill_rate, decode_rate = self._prefill_flops_rate, self._decode_flops_rate
        linear_s = prefill_linear / prefill_rate + decode_linear / decode_rate
        attn_s = prefill_attn / prefill_rate + decode_attn / decode_rate
        kv_tokens = (
            shape.prefill_context
            + shape.decode_context
            + shape.prefill_tokens
            + shape.decode_tokens
        )
        weights = self.weight_bytes(tokens)
        kv = self.kv_bytes_per_token * kv_tokens
        weights_s, kv_s = weights / self._byte_rate, kv / self._byte_rate
        roofline_s = max(linear_s, weights_s) + max(attn_s, kv_s)
        prefill_flops, decode_flops = prefill_linear + prefill_attn, decode_linear + decode_attn
        compute_s, nbytes, memory_s = linear_s + attn_s, weights + kv, weights_s + kv_s
        comm_s = self.comm_time(tokens)
        return (
            prefill_flops, decode_flops, compute_s, nbytes, memory_s, comm_s, overhead,
            roofline_s,
        )  # fmt: skip

    def comm_time(self, tokens: Any) -> Any:
        """Seconds of a step's tensor-parallel all-reduces for ``tokens`` tokens (0 at tp 1)."""
        if not self._comm_fixed_s:
            return 0.0 * tokens
        return self._comm_fixed_s + self._comm_s_per_token * tokens

    def weight_bytes(self, tokens: Any = None) -> Any:
        """Weight bytes one GPU reads in a step of ``tokens`` tokens: all of a dense model's
        but an untied embedding's table; a mixture of experts' shared weights and the
        experts its tokens touch (the module docstring). ``None`` tokens: every expert."""
        if tokens is None:
            return self.streamed_bytes_per_gpu
        if not self._untouched:
            return self.streamed_bytes_per_gpu + 0.0 * tokens  # an array stays one
        touched = 1 - self._untouched**tokens  # a step computes one token at least
        return self.dense_bytes_per_gpu + self.expert_bytes_per_gpu * touched

    def step_bytes(self, kv_tokens: Any, tokens: Any = None) -> Any:
        """Bytes a step moves on one GPU: the weights once (``weight_bytes`` of its
        ``tokens``), and ``kv_tokens`` tokens' KV (the context its sequences read and what
        it writes); scalars or numpy arrays."""
        return self.weight_bytes(tokens) + self.kv_bytes_per_token * kv_tokens

    @property
    def fixed_overhead_s(self) -> float:
        """What every step costs besides its roofline and its per-sequence overhead."""
        return self._fixed_overhead

    def step_time(self, shape: StepShape) -> float:
        """Modelled seconds of a step (before the driver's time scale): ``breakdown``'s
        ``duration_s``, without building the breakdown (the simulator's every step)."""
        fixed = self.config.fixed_step_s
        if fixed is not None:
            return fixed
        *_, comm_s, overhead, roofline_s = self._terms(shape)
        return roofline_s + comm_s + overhead

    # -- what diagnosis asks -------------------------------------------------------------
    def decode_shape(self, num_running: int, mean_context: float) -> StepShape:
        """A pure-decode step of ``num_running`` sequences at ``mean_context`` tokens each."""
        return StepShape(
            decode_tokens=num_running,
            decode_context=round(num_running * mean_context),
            num_running=num_running,
        )

    def decode_step_time(self, num_running: int, mean_context: float) -> float:
        """What one decode step (= one ITL) costs for a batch: the ITL the model explains."""
        return self.step_time(self.decode_shape(num_running, mean_context))

    def kv_bytes_per_step(self, num_running: int, mean_context: float) -> float:
        """KV bytes a pure-decode step reads and writes on one GPU (the H3 evidence)."""
        return self.kv_bytes_per_token * (num_running * (mean_context + 1))

    def decode_bound(self, num_running: int, mean_context: float) -> str:
        """Whether such a decode step is ``compute``- or ``bandwidth``-bound."""
        return self.breakdown(self.decode_shape(num_running, mean_context)).bound
