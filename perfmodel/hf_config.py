"""A model preset read from a served model's Hugging Face ``config.json``.

``model=DIR`` (a model folder holding ``config.json``) or ``model=DIR/config.json`` gives
the cost model the architecture the server actually loaded: layers, hidden size, query
and KV heads, head size, the MLP's intermediate size, the vocabulary and the weights'
dtype (``torch_dtype``). The parameter count is summed from those, for the Llama-family
layout (gated MLP, no biases): per layer ``hidden · head_dim · (2 · q_heads + 2 · kv_heads)``
for the attention projections, ``3 · hidden · intermediate`` for the MLP and two norms,
plus the token embedding, the LM head (unless ``tie_word_embeddings``) and the final norm
(``perfmodel.models.architecture``). A mixture of experts (``num_local_experts`` or
``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``) has that many MLPs
per layer and a router.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfmodel.models import ModelSpec, architecture
from workloads.errors import InputError

#: ``torch_dtype`` names as the cost model's dtype names.
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16"}
#: Where a mixture-of-experts config gives its expert count (Mixtral, Qwen3 MoE).
_EXPERT_KEYS = ("num_local_experts", "num_experts")
#: Keys a config must carry for the cost model (``head_dim`` defaults to hidden / heads).
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def hf_config_path(name: str) -> Path | None:
    """The ``config.json`` that ``name`` points at (a folder holding one, or the file
    itself when it reads as a Hugging Face config), else None."""
    path = Path(name)
    if path.is_dir():
        path = path / "config.json"
        return path if path.is_file() else None
    if path.name == "config.json" and path.is_file():
        return path
    return None


def _figure(config: dict[str, Any], key: str, path: Path) -> int:
    value = config[key]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InputError("model", f"{path}: {key} is {value!r}", "a positive integer is needed")
    return value


def model_from_hf_config(path: Path) -> ModelSpec:
    """The cost model's figures for the model whose ``config.json`` is at ``path``."""
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError("model", f"cannot read {path}: {exc}") from None
    missing = [k for k in _REQUIRED if k not in config] if isinstance(config, dict) else _REQUIRED
    if missing:
        raise InputError(
            "model", f"{path} lacks {', '.join(missing)}", "give a model's config.json"
        )
    hidden, layers, heads, inter = (_figure(config, k, path) for k in _REQUIRED)
    kv_heads = (
        _figure(config, "num_key_value_heads", path) if "num_key_value_heads" in config else heads
    )
    head_dim = _figure(config, "head_dim", path) if config.get("head_dim") else hidden // heads
    if heads % kv_heads or head_dim <= 0:
        raise InputError("model", f"{path}: {heads} heads over {kv_heads} KV heads do not divide")
    vocab = _figure(config, "vocab_size", path) if "vocab_size" in config else 0
    experts_key = next((k for k in _EXPERT_KEYS if config.get(k)), None)
    experts = _figure(config, experts_key, path) if experts_key else 0
    moe = (
        _figure(config, "moe_intermediate_size", path)
        if config.get("moe_intermediate_size")
        else None
    )
    dtype = _TORCH_DTYPES.get(str(config.get("torch_dtype", "bfloat16")), "bf16")
    return architecture(
        path.parent.name,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        intermediate=inter,
        vocab=vocab,
        head_dim=head_dim,
        tie_embeddings=bool(config.get("tie_word_embeddings")),
        experts=experts,
        experts_per_token=_figure(config, "num_experts_per_tok", path) if experts else 0,
        moe_intermediate=moe,
        dtype=dtype,
    )
