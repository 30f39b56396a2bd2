"""``perfmodel.hf_config``: a model preset from a served model's ``config.json``."""

from __future__ import annotations

import json

import pytest

from perfmodel.hf_config import hf_config_path, model_from_hf_config
from workloads.errors import InputError

#: Meta-Llama-3-8B's config.json (the keys the cost model reads); 8,030,261,248 parameters.
LLAMA3_8B = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _write(folder, config) -> object:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "config.json"


def test_llama3_8b_has_its_published_parameter_count_and_shape(tmp_path):
    model = model_from_hf_config(_write(tmp_path / "Meta-Llama-3-8B", LLAMA3_8B))
    assert model.params == 8_030_261_248
    assert (model.layers, model.kv_heads, model.head_dim, model.dtype) == (32, 8, 128, "bf16")
    assert model.name == "Meta-Llama-3-8B"
    assert model.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2


def test_tied_embeddings_count_the_embedding_once_and_head_dim_can_be_given(tmp_path):
    untied = model_from_hf_config(_write(tmp_path / "a", LLAMA3_8B))
    tied = model_from_hf_config(_write(tmp_path / "b", {**LLAMA3_8B, "tie_word_embeddings": True}))
    assert untied.params - tied.params == 128256 * 4096
    wide = model_from_hf_config(_write(tmp_path / "c", {**LLAMA3_8B, "head_dim": 256}))
    assert wide.head_dim == 256 and wide.dtype == "bf16"
    half = model_from_hf_config(_write(tmp_path / "d", {**LLAMA3_8B, "torch_dtype": "float16"}))
    assert half.dtype == "fp16"


def test_the_path_may_be_the_folder_or_the_file_and_anything_else_is_none(tmp_path):
    path = _write(tmp_path / "m", LLAMA3_8B)
    assert hf_config_path(str(tmp_path / "m")) == path == hf_config_path(str(path))
    assert hf_config_path(str(tmp_path)) is None and hf_config_path("llama-3-8b") is None


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"num_hidden_layers": None}, "lacks num_hidden_layers"),
        ({"hidden_size": 0}, "hidden_size is 0"),
        ({"num_key_value_heads": 5}, "32 heads over 5 KV heads do not divide"),
        ({"intermediate_size": True}, "intermediate_size is True"),
    ],
)
def test_a_config_the_cost_model_cannot_use_is_refused_naming_model(tmp_path, change, words):
    config = {k: v for k, v in {**LLAMA3_8B, **change}.items() if v is not None}
    with pytest.raises(InputError) as err:
        model_from_hf_config(_write(tmp_path / "m", config))
    assert err.value.field == "model" and words in err.value.problem


def test_unreadable_json_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InputError, match="cannot read"):
        model_from_hf_config(tmp_path / "config.json")
