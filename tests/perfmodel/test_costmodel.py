"""The roofline cost model and the model/GPU presets."""

from __future__ import annotations

import dataclasses
import json

import pytest

from perfmodel.config import EngineConfig, flag_error
from perfmodel.costmodel import CostModel, StepShape, attended_pairs
from perfmodel.models import GIB, GPUS, MODELS, resolve_gpu, resolve_model
from workloads.errors import InputError


def _cost(**overrides: object) -> CostModel:
    config = EngineConfig(**overrides)
    config.validate()
    return CostModel.from_config(config)


def test_gpu_presets_carry_the_issue_figures() -> None:
    figures = {
        name: (g.peak_flops / 1e12, g.bandwidth / 1e12, g.memory_bytes / GIB)
        for name, g in GPUS.items()
    }
    assert figures == {
        "h100-sxm": (989.4, 3.35, 80),
        "h200": (989.4, 4.8, 141),
        "a100-80gb": (312, 2.039, 80),
        "l40s": (362, 0.864, 48),
        "mi300x": (1307.4, 5.3, 192),
        "rtx-4090": (165.2, 1.008, 24),
        "rtx-pro-6000": (503.8, 1.792, 96),
    }


def test_model_presets_are_the_public_architectures() -> None:
    shapes = {n: (m.layers, m.q_heads, m.kv_heads, m.head_dim) for n, m in MODELS.items()}
    assert shapes == {
        "llama-3.1-8b": (32, 32, 8, 128),
        "llama-3.1-70b": (80, 64, 8, 128),
        "qwen2.5-7b": (28, 28, 4, 128),
        "mistral-7b": (32, 32, 8, 128),
        "llama-2-7b": (32, 32, 32, 128),
        "llama-2-70b": (80, 64, 8, 128),
        "codellama-34b": (48, 64, 8, 128),
        "mixtral-8x7b": (32, 32, 8, 128),
        "mixtral-8x22b": (56, 48, 8, 128),
        "qwen3-14b": (40, 40, 8, 128),
        "qwen3-32b": (64, 64, 8, 128),
        "qwen3-30b-a3b": (48, 32, 4, 128),
    }
    fp16 = {"llama-2-7b", "llama-2-70b"}  # their config.json's torch_dtype
    assert all(m.dtype == ("fp16" if n in fp16 else "bf16") for n, m in MODELS.items())
    assert MODELS["llama-3.1-8b"].kv_bytes_per_token() == 131_072


@pytest.mark.parametrize(
    ("resolve", "name", "field"),
    [(resolve_model, "gpt-9", "model"), (resolve_gpu, "tpu-v9", "gpu")],
)
def test_unknown_names_list_the_valid_ones(resolve, name: str, field: str) -> None:
    with pytest.raises(InputError) as err:
        resolve(name)
    assert err.value.field == field
    valid = MODELS if field == "model" else GPUS
    assert all(v in str(err.value) for v in valid)


@pytest.mark.parametrize(
    ("hf_id", "preset"),
    [
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ],
)
def test_an_instruct_or_chat_variant_of_a_preset_is_that_preset(hf_id: str, preset: str) -> None:
    assert resolve_model(hf_id) is MODELS[preset]


@pytest.mark.parametrize(
    "hf_id", ["Qwen/Qwen3-14B-FP8", "Qwen/Qwen3-32B-AWQ", "meta-llama/Llama-3.3-70B-Instruct"]
)
def test_a_quantized_or_unknown_model_is_not_guessed(hf_id: str) -> None:
    """A quantization reads other weight bytes, and a new release may change the layers:
    neither is taken for the preset its name resembles."""
    with pytest.raises(InputError) as err:
        resolve_model(hf_id)
    assert err.value.field == "model" and "config.json" in str(err.value)


def test_custom_model_inline_and_from_files(tmp_path) -> None:
    inline = resolve_model("custom:params=7e9,layers=32,q_heads=32,kv_heads=8,head_dim=128")
    assert (inline.params, inline.layers, inline.hidden, inline.dtype) == (7e9, 32, 4096, "bf16")
    spec = {
        "name": "mine",
        "params": 3e9,
        "layers": 24,
        "q_heads": 16,
        "kv_heads": 4,
        "head_dim": 64,
        "dtype": "fp8",
    }
    (tmp_path / "m.json").write_text(json.dumps(spec))
    toml = "\n".join(f"{k} = {json.dumps(v)}" for k, v in spec.items())
    (tmp_path / "m.toml").write_text(toml)
    for path in ("m.json", "m.toml"):
        model = resolve_model(str(tmp_path / path))
        assert (model.name, model.layers, model.kv_heads, model.dtype_bytes) == ("mine", 24, 4, 1)
    with pytest.raises(InputError, match="lacks"):
        resolve_model("custom:params=7e9,layers=32")


#: Llama-3.1-8B from its config.json: every parameter, and the embedding (= LM head) matrix.
LLAMA8_PARAMS = (
    32 * (4096 * 128 * (64 + 16) + 2 * 4096 + 3 * 4096 * 14336) + 2 * 128256 * 4096 + 4096
)
LLAMA8_HEAD = 128256 * 4096


def test_kv_pool_is_memory_times_utilisation_minus_weights() -> None:
    cost = _cost()
    assert cost.model.params == LLAMA8_PARAMS == pytest.approx(8.03e9, rel=1e-3)
    expected = int((80 * GIB * 0.9 - LLAMA8_PARAMS * 2) // (131_072 * 16))
    assert cost.kv_pool_blocks(16) == expected  # the memory holds every weight, embedding too
    tp2 = _cost(model="llama-3.1-70b", tensor_parallel_size=2)
    assert tp2.weight_bytes_per_gpu == pytest.approx(70.55e9, rel=1e-3)
    assert tp2.kv_bytes_per_token == 2 * 80 * 4 * 128 * 2
    held = tp2.weight_bytes_per_gpu
    assert tp2.kv_pool_blocks(16) == int((80 * GIB * 0.9 - held) // (tp2.kv_bytes_per_token * 16))


def test_a_model_that_does_not_fit_is_an_input_error() -> None:
    with pytest.raises(InputError) as err:
        _cost(model="llama-3.1-70b").kv_pool_blocks(16)
    assert err.value.field == "model" and "tensor_parallel_size" in str(err.value)


def test_single_decode_is_weight_bandwidth_bound() -> None:
    cost = _cost()
    step = cost.breakdown(cost.decode_shape(1, 0))
    # every weight but the untied embedding's table, of which one row is gathered
    weights_s = (LLAMA8_PARAMS - LLAMA8_HEAD) * 2 / (3.35e12 * 0.8)
    assert step.bound == "bandwidth"
    assert step.memory_s == pytest.approx(weights_s, rel=1e-3)
    assert step.duration_s == pytest.approx(weights_s + 1e-4 + 32 * 30e-6, rel=1e-3)


def test_flops_and_bytes_follow_the_issue_formulas() -> None:
    cost = _cost()
    shape = StepShape(
        prefill_tokens=512,
        prefill_pairs=attended_pairs(512, 1024),
        prefill_context=1024,
        num_running=1,
    )
    step = cost.breakdown(shape)
    # 512 tokens through the layers (no embedding, no head), one row through the LM head
    body = 2 * (LLAMA8_PARAMS - 2 * LLAMA8_HEAD) * 512
    attention = 4 * 32 * 32 * 128 * (512 * 1024 + 512 * 513 // 2)
    head = 2 * LLAMA8_HEAD
    assert step.flops == pytest.approx(body + attention + head)
    assert step.compute_s == pytest.approx(
        (body + attention) / (989.4e12 * 0.45) + head / (989.4e12 * 0.30)
    )
    assert step.bytes == pytest.approx((LLAMA8_PARAMS - LLAMA8_HEAD) * 2 + 131_072 * (1024 + 512))
    assert step.bound == "compute"


def test_mixed_step_adds_prefill_and_decode_compute() -> None:
    cost = _cost()
    prefill = StepShape(prefill_tokens=2000, prefill_pairs=attended_pairs(2000, 0), num_running=1)
    decode = StepShape(decode_tokens=32, decode_context=32 * 500, num_running=32)
    mixed = StepShape(prefill.prefill_tokens, prefill.prefill_pairs, 0, 32, 32 * 500, 33)
    assert cost.breakdown(mixed).compute_s == pytest.approx(
        cost.breakdown(prefill).compute_s + cost.breakdown(decode).compute_s
    )


def test_later_chunks_of_a_long_prompt_cost_more() -> None:
    cost = _cost()
    times = [
        cost.step_time(
            StepShape(prefill_tokens=2048, prefill_pairs=attended_pairs(2048, p), prefill_context=p)
        )
        for p in (0, 8192, 30_720)
    ]
    assert times[0] < times[1] < times[2]
    assert times[2] > 1.5 * times[0]


def test_decode_time_tracks_kv_bytes_when_bandwidth_bound() -> None:
    cost = _cost()
    short, long = cost.decode_step_time(256, 2000), cost.decode_step_time(256, 8000)
    assert cost.decode_bound(256, 2000) == cost.decode_bound(256, 8000) == "bandwidth"
    assert cost.decode_bound(256, 100) == "compute"
    assert cost.kv_bytes_per_step(256, 8000) == 131_072 * 256 * 8001
    extra = (cost.kv_bytes_per_step(256, 8000) - cost.kv_bytes_per_step(256, 2000)) / (
        3.35e12 * 0.8
    )
    assert long - short == pytest.approx(extra, rel=1e-6)


def test_large_prefill_is_compute_bound_on_every_gpu() -> None:
    for gpu in GPUS:
        cost = _cost(gpu=gpu)
        shape = StepShape(prefill_tokens=4096, prefill_pairs=attended_pairs(4096, 0))
        assert cost.breakdown(shape).bound == "compute", gpu


def test_host_overheads_add_per_step_and_per_running_request() -> None:
    base = _cost()
    planted = _cost(host_overhead_step_s=0.002, host_overhead_per_seq_s=0.0001)
    shape = base.decode_shape(64, 100)
    assert planted.step_time(shape) - base.step_time(shape) == pytest.approx(0.002 + 64 * 0.0001)


def test_fixed_step_replaces_the_model() -> None:
    cost = _cost(fixed_step_s=0.02)
    assert cost.step_time(cost.decode_shape(500, 10_000)) == 0.02
    assert cost.step_time(StepShape(prefill_tokens=2048)) == 0.02


def test_faster_gpu_is_faster() -> None:
    shape = StepShape(decode_tokens=64, decode_context=64 * 2000, num_running=64)
    times = {g: _cost(gpu=g).step_time(shape) for g in ("l40s", "a100-80gb", "h100-sxm", "h200")}
    assert times["l40s"] > times["a100-80gb"] > times["h100-sxm"] > times["h200"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"max_num_batched_tokens": 128, "max_num_seqs": 256}, "max_num_batched_tokens"),
        ({"model": "qwen2.5-7b", "tensor_parallel_size": 8}, "tensor_parallel_size"),
        ({"block_size": 0}, "block_size"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"time_scale": 0}, "time_scale"),
        ({"gpu": "b300"}, "gpu"),
        ({"fixed_step_s": -1.0}, "fixed_step_s"),
        ({"host_overhead_per_seq_s": -1e-6}, "host_overhead_per_seq_s"),
        ({"step_overhead_s": -1.0}, "step_overhead_s"),
    ],
)
def test_config_validation_names_the_field(overrides: dict, field: str) -> None:
    """The error names the config field (every field is one), never a command's flag."""
    with pytest.raises(InputError) as err:
        EngineConfig(**overrides).validate()
    assert err.value.field == field
    assert err.value.field in {f.name for f in dataclasses.fields(EngineConfig)}


def test_each_command_line_names_the_field_as_its_own_flag() -> None:
    with pytest.raises(InputError) as err:
        EngineConfig(host_overhead_per_seq_s=-1e-6).validate()
    serve = {"host_overhead_per_seq_s": "--host-overhead-per-seq-us"}
    assert flag_error(err.value, serve).field == "--host-overhead-per-seq-us"
    assert flag_error(err.value, {}).field == "--host-overhead-per-seq-s"
    assert flag_error(err.value, serve).problem == err.value.problem


def test_a_served_models_config_json_is_a_model(tmp_path) -> None:
    """Llama 3.1 8B's Hugging Face config gives its published 8.03 B parameters."""
    config = {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name in (str(tmp_path), str(tmp_path / "config.json")):
        model = resolve_model(name)
        assert model.params == pytest.approx(8.03e9, rel=1e-3)
        assert (model.layers, model.q_heads, model.kv_heads, model.head_dim) == (32, 32, 8, 128)
        assert model.dtype == "fp32"
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_key_value_heads": 0}))
    with pytest.raises(InputError, match="num_key_value_heads"):
        resolve_model(str(tmp_path))


def test_a_device_without_a_preset_is_given_inline() -> None:
    cpu = resolve_gpu("custom:peak_flops=1e12,bandwidth=5e10,memory_gib=2")
    assert (cpu.peak_flops, cpu.bandwidth, cpu.memory_bytes) == (1e12, 5e10, 2 * GIB)
    for bad in ("custom:peak_flops=1e12", "custom:peak_flops=0,bandwidth=1,memory_gib=1"):
        with pytest.raises(InputError) as err:
            resolve_gpu(bad)
        assert err.value.field == "gpu"


def test_ground_truth_presets_match_their_config_files() -> None:
    """The presets' figures are those their public config.json files give (the copies the
    scoreboard's fixtures hold), parameters and active parameters included."""
    from pathlib import Path

    from perfmodel.hf_config import model_from_hf_config

    folder = Path(__file__).parents[1] / "fixtures" / "ground-truth" / "training" / "model_configs"
    names = {"Llama-2-7b-hf": "meta-llama/Llama-2-7b-hf",
             "Llama-2-70b-hf": "meta-llama/Llama-2-70b-hf",
             "CodeLlama-34b-Instruct-hf": "codellama/CodeLlama-34b-Instruct-hf",
             "Mixtral-8x7B-v0.1": "mistralai/Mixtral-8x7B-v0.1"}  # fmt: skip
    for folder_name, hf_id in names.items():
        read = model_from_hf_config(folder / folder_name / "config.json")
        preset = resolve_model(hf_id)
        assert dataclasses.replace(read, name=preset.name) == preset
    mixtral = resolve_model("mixtral-8x7b")
    assert mixtral.params == pytest.approx(46.70e9, rel=1e-3)
    assert mixtral.active_params == pytest.approx(12.88e9, rel=1e-3)
    assert resolve_model("qwen3-30b-a3b").active_params == pytest.approx(3.35e9, rel=1e-2)


def test_moe_reads_the_experts_its_tokens_touch_and_multiplies_by_active_params() -> None:
    cost = _cost(model="mixtral-8x7b", tensor_parallel_size=2)
    one = cost.breakdown(cost.decode_shape(1, 0))
    many = cost.breakdown(cost.decode_shape(64, 0))
    model = cost.model
    # one token: the shared weights and 2 of 8 experts; 64 tokens: all 8 (1 - 0.75**64 ~ 1)
    table = model.head_params  # the untied embedding: gathered, not read whole
    assert one.bytes - cost.kv_bytes_per_token == pytest.approx(
        (model.dense_params - table + model.expert_params * 2 / 8) * 2 / 2
    )
    assert many.bytes - 64 * cost.kv_bytes_per_token == pytest.approx(
        (model.params - table) * 2 / 2
    )
    # one token through the active layers and the LM head, none through the embedding
    assert one.flops == pytest.approx(2 * (model.active_params - table) / 2 + 4 * 32 * 32 * 128 / 2)
    dense = _cost(model="llama-2-70b", tensor_parallel_size=4)
    assert dense.weight_bytes(1) == dense.weight_bytes(512) == dense.streamed_bytes_per_gpu


def test_tensor_parallel_steps_pay_two_all_reduces_per_layer() -> None:
    tp1 = _cost(model="codellama-34b", gpu="h200")
    tp2 = _cost(model="codellama-34b", gpu="h200", tensor_parallel_size=2)
    assert tp1.breakdown(tp1.decode_shape(8, 100)).comm_s == 0
    gpu, model = tp2.gpu, tp2.model
    for tokens in (1, 2048):
        comm = tp2.breakdown(StepShape(prefill_tokens=tokens, prefill_pairs=tokens)).comm_s
        bytes_through_link = 2 * (2 - 1) / 2 * tokens * model.hidden * 2
        expected = 2 * model.layers * (gpu.link_latency_s + bytes_through_link / gpu.link_bandwidth)
        assert comm == pytest.approx(expected)


def test_the_embedding_is_gathered_and_the_head_multiplies_only_sampled_rows() -> None:
    """A prefill token costs its layers only; the LM head one row per sequence; a tied
    head is the embedding matrix, read whole; an unknown vocabulary changes nothing."""
    cost = _cost()
    prefill = cost.breakdown(StepShape(prefill_tokens=2048, num_running=1))
    decode = cost.breakdown(StepShape(decode_tokens=2048, num_running=2048))
    attention = 4 * 32 * 32 * 128 * 2048  # each decode token attends to itself
    assert decode.flops - prefill.flops == pytest.approx(2047 * 2 * LLAMA8_HEAD + attention)
    assert prefill.flops == pytest.approx(
        2 * (LLAMA8_PARAMS - 2 * LLAMA8_HEAD) * 2048 + 2 * LLAMA8_HEAD
    )
    tied = dataclasses.replace(cost.model, tie_embeddings=True, params=LLAMA8_PARAMS - LLAMA8_HEAD)
    assert (
        tied.streamed_params == tied.params and tied.body_params == LLAMA8_PARAMS - 2 * LLAMA8_HEAD
    )
    unknown = dataclasses.replace(cost.model, vocab=0)
    assert unknown.streamed_params == unknown.body_params == unknown.params
    custom = resolve_model(
        "custom:params=8.03e9,layers=32,q_heads=32,kv_heads=8,head_dim=128,vocab=128256"
    )
    assert custom.body_params == pytest.approx(8.03e9 - 2 * LLAMA8_HEAD)
    with pytest.raises(InputError, match="vocab"):
        resolve_model("custom:params=1e9,layers=32,q_heads=32,kv_heads=8,head_dim=128,vocab=200000")


def test_a_custom_model_may_carry_its_experts() -> None:
    mixtral = resolve_model("mixtral-8x7b")
    spec = (
        f"custom:params={mixtral.params},layers=32,q_heads=32,kv_heads=8,head_dim=128,"
        f"vocab=32000,experts=8,experts_per_token=2,expert_params={mixtral.expert_params}"
    )
    custom = resolve_model(spec)
    assert custom.active_params == pytest.approx(mixtral.active_params)
    assert custom.body_params == pytest.approx(mixtral.body_params)
    with pytest.raises(InputError, match="experts_per_token"):
        resolve_model("custom:params=1e9,layers=2,q_heads=4,kv_heads=4,head_dim=64,experts=8")
