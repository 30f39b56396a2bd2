"""Model and GPU presets: the figures the roofline cost model needs, and nothing else.

A model is reduced to what decides a step's cost: parameter count (linear FLOPs and
weight bytes), the attention shape (layers, query heads, KV heads, head size) and the
weight/KV dtype. A GPU is peak dense bf16 FLOP/s, HBM bandwidth and memory size.

Model figures are the public architecture configs (Hugging Face ``config.json``):
``llama-3.1-8b`` (8.03 B params, 32 layers, hidden 4096, 32 q / 8 kv heads, head 128),
``llama-3.1-70b`` (70.6 B, 80 layers, hidden 8192, 64 / 8 heads, head 128),
``qwen2.5-7b`` (7.62 B, 28 layers, hidden 3584, 28 / 4 heads, head 128) and
``mistral-7b`` (v0.3: 7.25 B, 32 layers, hidden 4096, 32 / 8 heads, head 128), all bf16.

The models of the public real-GPU measurements the sim-to-real scoreboard replays are
presets too, summed from their ``config.json`` by ``architecture`` (the same arithmetic
as ``perfmodel.hf_config``) and also found by their Hugging Face id: Llama-2-7b (MHA:
32 KV heads), Llama-2-70b, CodeLlama-34b, Mixtral-8x7B and -8x22B (8 experts, 2 per
token), Qwen3-14B, Qwen3-32B and Qwen3-30B-A3B (128 experts, 8 per token), Llama-3.1-8B.
A mixture-of-experts model carries its expert count, experts per token and the
parameters inside its experts: a token's FLOPs use the *active* parameters, a step's
weight traffic the experts its tokens touch (``perfmodel.costmodel``).

A custom model is either an inline spec,
``custom:params=7e9,layers=32,q_heads=32,kv_heads=8,head_dim=128`` (optional ``hidden``,
default ``q_heads * head_dim``, ``dtype``, default bf16, ``vocab``, which sets the
embedding and the LM head apart as the cost model wants them, without it they count as
any weight, and for a mixture of experts ``experts``, ``experts_per_token`` and
``expert_params``), or the path of a ``.json`` or ``.toml`` file holding the same keys
(plus an optional ``name``).

GPU memory is in GiB as the driver reports it ("80 GB" H100 ≈ 80 GiB of HBM). A GPU's
``link_bandwidth`` is one direction of its GPU-to-GPU link (H100 SXM NVLink 4: 900 GB/s
both ways, 450 each; PCIe Gen4 x16 32 GB/s, Gen5 64 GB/s per direction) and
``link_latency_s`` one small all-reduce's latency over it (NVLink ~10 µs, PCIe ~25 µs:
the published small-message figures of NCCL and vLLM's custom all-reduce).
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from workloads.errors import InputError

GIB = 1 << 30

#: Bytes per element of the dtypes a model's weights or KV cache can use.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


def dtype_bytes(dtype: str, field: str = "dtype") -> int:
    """Bytes per element of ``dtype``; an unknown name is an InputError listing the valid ones."""
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        valid = ", ".join(DTYPE_BYTES)
        raise InputError(field, f"unknown dtype {dtype!r}", f"use one of {valid}") from None


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, elem_bytes: int) -> int:
    """K and V for one token across all layers: ``2 · layers · kv_heads · head_dim · bytes``."""
    return 2 * layers * kv_heads * head_dim * elem_bytes


@dataclass(frozen=True)
class ModelSpec:
    """The architecture figures that decide a step's FLOPs and bytes."""

    name: str
    params: float
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    dtype: str = "bf16"
    #: Mixture of experts: experts per layer (0: a dense model), experts each token is
    #: routed to, and the parameters inside all experts of all layers.
    experts: int = 0
    experts_per_token: int = 0
    expert_params: float = 0.0
    #: The vocabulary (0: unknown, the embedding then counted as any weight) and whether
    #: the LM head is the embedding matrix itself (``tie_word_embeddings``).
    vocab: int = 0
    tie_embeddings: bool = False

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def head_params(self) -> float:
        """The LM head's matrix, ``vocab · hidden`` (the embedding's when tied)."""
        return float(self.vocab * self.hidden)

    @property
    def body_params(self) -> float:
        """Active parameters every token multiplies by: all but the token embedding (a
        lookup, no arithmetic) and the LM head (which multiplies only the positions whose
        logits are sampled)."""
        return self.active_params - self.head_params * (1 if self.tie_embeddings else 2)

    @property
    def streamed_params(self) -> float:
        """Parameters a step whose tokens touch every expert reads: all but an untied
        token embedding, of which a step gathers only its tokens' rows."""
        return self.params - (0.0 if self.tie_embeddings else self.head_params)

    @property
    def active_params(self) -> float:
        """Parameters one token's forward pass multiplies by (all of a dense model's)."""
        if not self.experts:
            return self.params
        return self.params - self.expert_params * (1 - self.experts_per_token / self.experts)

    @property
    def dense_params(self) -> float:
        """Parameters every step reads whatever its tokens' routing (all but the experts)."""
        return self.params - self.expert_params

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads one GPU holds under tensor parallelism (replicated when tp > kv_heads)."""
        return max(1, self.kv_heads // tp)

    def kv_bytes_per_token(self, tp: int = 1) -> int:
        """KV bytes one token occupies on one GPU of a ``tp``-way tensor-parallel group."""
        return kv_bytes_per_token(
            self.layers, self.kv_heads_per_gpu(tp), self.head_dim, self.dtype_bytes
        )


@dataclass(frozen=True)
class GpuSpec:
    """Peak dense bf16 compute, HBM bandwidth and memory of one accelerator."""

    name: str
    peak_flops: float
    bandwidth: float
    memory_bytes: float
    link_bandwidth: float = 450e9
    link_latency_s: float = 10e-6


def architecture(
    name: str,
    *,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    vocab: int,
    head_dim: int | None = None,
    tie_embeddings: bool = False,
    experts: int = 0,
    experts_per_token: int = 0,
    moe_intermediate: int | None = None,
    dtype: str = "bf16",
) -> ModelSpec:
    """A Llama-family model (gated MLP, no biases) from its ``config.json`` figures.

    Per layer: ``hidden · head_dim · (2 · heads + 2 · kv_heads)`` attention projections,
    two norms, and a gated MLP of ``3 · hidden · intermediate``; a mixture of experts has
    ``experts`` such MLPs of ``moe_intermediate`` (default ``intermediate``) and a router
    of ``hidden · experts``. Plus the embedding, the LM head (unless tied) and the final
    norm.
    """
    head_dim = head_dim or hidden // heads
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads) + 2 * hidden
    if experts:
        expert_layer = experts * 3 * hidden * (moe_intermediate or intermediate)
        per_layer = attention + expert_layer + hidden * experts
    else:
        expert_layer = 0
        per_layer = attention + 3 * hidden * intermediate
    params = layers * per_layer + (1 if tie_embeddings else 2) * vocab * hidden + hidden
    return ModelSpec(
        name,
        float(params),
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim,
        dtype,
        experts=experts,
        experts_per_token=experts_per_token if experts else 0,
        expert_params=float(layers * expert_layer),
        vocab=vocab,
        tie_embeddings=tie_embeddings,
    )


_LLAMA2 = {"vocab": 32000}
_QWEN3 = {"vocab": 151936, "head_dim": 128}

#: The public models of the sim-to-real ground truth, by Hugging Face id → preset.
HF_IDS: dict[str, ModelSpec] = {
    "meta-llama/Llama-2-7b-hf": architecture(
        "llama-2-7b", hidden=4096, layers=32, heads=32, kv_heads=32, intermediate=11008,
        dtype="fp16", **_LLAMA2),
    "meta-llama/Llama-2-70b-hf": architecture(
        "llama-2-70b", hidden=8192, layers=80, heads=64, kv_heads=8, intermediate=28672,
        dtype="fp16", **_LLAMA2),
    "codellama/CodeLlama-34b-Instruct-hf": architecture(
        "codellama-34b", hidden=8192, layers=48, heads=64, kv_heads=8, intermediate=22016,
        **_LLAMA2),
    "mistralai/Mixtral-8x7B-v0.1": architecture(
        "mixtral-8x7b", hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14336,
        experts=8, experts_per_token=2, **_LLAMA2),
    "mistralai/Mixtral-8x22B-Instruct-v0.1": architecture(
        "mixtral-8x22b", hidden=6144, layers=56, heads=48, kv_heads=8, intermediate=16384,
        vocab=32768, experts=8, experts_per_token=2),
    "Qwen/Qwen3-14B": architecture(
        "qwen3-14b", hidden=5120, layers=40, heads=40, kv_heads=8, intermediate=17408, **_QWEN3),
    "Qwen/Qwen3-32B": architecture(
        "qwen3-32b", hidden=5120, layers=64, heads=64, kv_heads=8, intermediate=25600, **_QWEN3),
    "Qwen/Qwen3-30B-A3B-Instruct-2507": architecture(
        "qwen3-30b-a3b", hidden=2048, layers=48, heads=32, kv_heads=4, intermediate=6144,
        experts=128, experts_per_token=8, moe_intermediate=768, **_QWEN3),
    "meta-llama/Llama-3.1-8B": architecture(
        "llama-3.1-8b", hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14336,
        vocab=128256),
}  # fmt: skip

#: The other presets, from their config.json too (Qwen2.5-7B's q/k/v biases, 0.4 M, left
#: out like the norms' weights elsewhere).
_PRESETS = (
    architecture(
        "llama-3.1-70b", hidden=8192, layers=80, heads=64, kv_heads=8, intermediate=28672,
        vocab=128256),
    architecture(
        "qwen2.5-7b", hidden=3584, layers=28, heads=28, kv_heads=4, intermediate=18944,
        vocab=152064),
    architecture(
        "mistral-7b", hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14336,
        vocab=32768),
)  # fmt: skip

MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        *_PRESETS,
        *HF_IDS.values(),
    )
}
_BY_HF_ID = {hf.lower(): MODELS[m.name] for hf, m in HF_IDS.items()}

#: Name parts that mark a fine-tune or a packaging of the same architecture (an
#: instruction or chat tune, the Hugging Face port, a release date or version tag), not
#: another one; a quantization (``-FP8``, ``-AWQ``) is not among them: its weights differ.
_VARIANT_PARTS = re.compile(r"-(?:instruct|chat|hf|it|base|\d{4}|v\d+(?:\.\d+)*)(?=-|$)")


def _base_name(name: str) -> str:
    """``name`` without its organisation and variant parts, lower-case:
    ``meta-llama/Meta-Llama-3.1-70B-Instruct`` → ``llama-3.1-70b``."""
    repo = name.lower().rsplit("/", 1)[-1]
    return _VARIANT_PARTS.sub("", repo.removeprefix("meta-"))


#: Each preset by its base name and by its Hugging Face id's: an instruct or chat variant
#: of a known model is that model (same layers, heads and parameters).
_BY_BASE_NAME = {
    **{_base_name(m.name): m for m in MODELS.values()},
    **{_base_name(hf): m for hf, m in _BY_HF_ID.items()},
}

GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec("h100-sxm", 989.4e12, 3.35e12, 80 * GIB),
        GpuSpec("h200", 989.4e12, 4.8e12, 141 * GIB),
        GpuSpec("a100-80gb", 312e12, 2.039e12, 80 * GIB),
        GpuSpec("l40s", 362e12, 0.864e12, 48 * GIB),
        GpuSpec("mi300x", 1307.4e12, 5.3e12, 192 * GIB),
        # GeForce RTX 4090 (Ada): 165.2 TFLOP/s dense bf16 with fp32 accumulate, 1,008 GB/s
        # GDDR6X, 24 GB; no NVLink: GPUs talk over PCIe Gen4 x16
        GpuSpec("rtx-4090", 165.2e12, 1.008e12, 24 * GIB, 32e9, 25e-6),
        # RTX PRO 6000 Blackwell: ~504 TFLOP/s dense bf16, 1,792 GB/s GDDR7, 96 GB; PCIe Gen5
        GpuSpec("rtx-pro-6000", 503.8e12, 1.792e12, 96 * GIB, 64e9, 25e-6),
    )
}

_CUSTOM_PREFIX = "custom:"
_CUSTOM_INT_KEYS = ("layers", "q_heads", "kv_heads", "head_dim")
#: Optional whole figures: the vocabulary, a mixture of experts' experts and experts per
#: token (``expert_params``, the parameters inside all experts, is read beside them).
_CUSTOM_OPTIONAL_INT_KEYS = ("vocab", "experts", "experts_per_token")
_CUSTOM_HELP = (
    "give a preset ({}), a model's config.json (or its folder), "
    "'custom:params=7e9,layers=32,q_heads=32,kv_heads=8,head_dim=128' "
    "or a .json/.toml file with those keys"
)


_DEVICE_HELP = (
    "use one of {} or a device of your own, 'custom:peak_flops=1e12,bandwidth=5e10,memory_gib=16'"
    " (FLOP/s, bytes/s, GiB; optional link_gbps, link_latency_us; e.g. a CPU, whose"
    " efficiencies simulate --calibrate then fits)"
)


def resolve_gpu(name: str) -> GpuSpec:
    """A preset, or an inline ``custom:peak_flops=…,bandwidth=…,memory_gib=…`` device."""
    preset = GPUS.get(name.lower())
    if preset is not None:
        return preset
    if not name.startswith(_CUSTOM_PREFIX):
        raise InputError("gpu", f"unknown GPU {name!r}", _DEVICE_HELP.format(", ".join(GPUS)))
    spec = _parse_inline(name[len(_CUSTOM_PREFIX) :], "gpu")
    try:
        figures = [float(spec[k]) for k in ("peak_flops", "bandwidth", "memory_gib")]
    except (KeyError, ValueError):
        raise InputError(
            "gpu", f"custom device {name!r} is incomplete", _DEVICE_HELP.format("a preset")
        ) from None
    if not all(0 < f < float("inf") for f in figures):
        raise InputError("gpu", f"custom device {name!r} has a figure <= 0 or not finite")
    try:  # optional: the GPU-to-GPU link (GB/s one way, µs per small all-reduce)
        link = float(spec.get("link_gbps", GpuSpec.link_bandwidth / 1e9)) * 1e9
        latency = float(spec.get("link_latency_us", GpuSpec.link_latency_s * 1e6)) / 1e6
    except ValueError:
        raise InputError("gpu", f"custom device {name!r}: link figures must be numbers") from None
    if not (link > 0 and latency >= 0):
        raise InputError("gpu", f"custom device {name!r}: link_gbps must be > 0")
    return GpuSpec(name, figures[0], figures[1], figures[2] * GIB, link, latency)


def resolve_model(name: str) -> ModelSpec:
    """A preset (by name, or by a Hugging Face id of it or of an instruct or chat variant of
    it), an inline ``custom:k=v,...`` spec, a model's ``config.json`` (or its folder), or a
    JSON/TOML file of the custom keys."""
    preset = MODELS.get(name.lower()) or _BY_HF_ID.get(name.lower())
    if preset is None and "/" in name and not Path(name).exists():  # a Hugging Face id
        preset = _BY_BASE_NAME.get(_base_name(name))
    if preset is not None:
        return preset
    from perfmodel.hf_config import hf_config_path, model_from_hf_config

    config = hf_config_path(name)
    if config is not None:
        return model_from_hf_config(config)
    if name.startswith(_CUSTOM_PREFIX):
        return _custom_model(name, _parse_inline(name[len(_CUSTOM_PREFIX) :]))
    path = Path(name)
    if path.suffix in (".json", ".toml") and path.is_file():
        return _custom_model(name, _load_spec_file(path))
    raise InputError("model", f"unknown model {name!r}", _CUSTOM_HELP.format(", ".join(MODELS)))


def _parse_inline(body: str, field: str = "model") -> dict[str, str]:
    spec: dict[str, str] = {}
    for item in filter(None, body.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(field, f"custom spec item {item!r} is not key=value")
        spec[key.strip()] = value.strip()
    return spec


def _load_spec_file(path: Path) -> dict:
    try:
        text = path.read_text()
        return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as exc:
        raise InputError("model", f"cannot read model file {path}: {exc}") from None


def _custom_model(name: str, spec: dict) -> ModelSpec:
    missing = [k for k in ("params", *_CUSTOM_INT_KEYS) if k not in spec]
    if missing:
        raise InputError(
            "model", f"custom model lacks {', '.join(missing)}", _CUSTOM_HELP.format("…")
        )
    try:
        ints = {k: int(float(spec[k])) for k in _CUSTOM_INT_KEYS}
        params = float(spec["params"])
        hidden = int(float(spec.get("hidden", ints["q_heads"] * ints["head_dim"])))
    except (TypeError, ValueError):
        raise InputError("model", f"custom model {name!r} has a non-numeric figure") from None
    if params <= 0 or hidden <= 0 or min(ints.values()) <= 0:
        raise InputError("model", f"custom model {name!r} has a figure <= 0")
    if ints["q_heads"] % ints["kv_heads"]:
        raise InputError("model", "q_heads must be a multiple of kv_heads")
    dtype = str(spec.get("dtype", "bf16")).lower()
    dtype_bytes(dtype, "model")
    try:
        vocab, experts, per_token = (int(float(spec.get(k, 0))) for k in _CUSTOM_OPTIONAL_INT_KEYS)
        expert_params = float(spec.get("expert_params", 0))
    except (TypeError, ValueError):
        raise InputError("model", f"custom model {name!r} has a non-numeric figure") from None
    if vocab < 0 or 2 * vocab * hidden >= params:
        raise InputError(
            "model", f"custom model {name!r}: vocab {vocab} × hidden {hidden} twice is not "
            "within params", "give the vocabulary size of the model's config.json",
        )  # fmt: skip
    if experts and not (0 < per_token <= experts and 0 < expert_params < params):
        raise InputError(
            "model", f"custom model {name!r}: experts need 0 < experts_per_token <= experts "
            "and 0 < expert_params < params",
            "e.g. experts=8,experts_per_token=2,expert_params=45e9",
        )  # fmt: skip
    return ModelSpec(
        name=str(spec.get("name", name)),
        params=params,
        hidden=hidden,
        dtype=dtype,
        vocab=vocab,
        experts=experts,
        experts_per_token=per_token if experts else 0,
        expert_params=expert_params if experts else 0.0,
        **ints,
    )
