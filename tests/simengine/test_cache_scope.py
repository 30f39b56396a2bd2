"""The embedded engine's cache scope: salts honoured or ignored, LoRA adapters as models."""

from __future__ import annotations

import pytest

from perfmodel.config import EngineConfig
from simengine.openai_api import ApiError, ServedModel, parse_completion
from simengine.tokenizer import Tokenizer
from workloads.errors import InputError
from workloads.prefix import block_hashes

TOKENIZER = Tokenizer(32000)
PROMPT = list(range(300, 332))


def _scope(served: ServedModel, **body):
    return parse_completion({"prompt": PROMPT, **body}, served).engine.scope


def _hashes(scope) -> list[int]:
    return block_hashes(PROMPT, 16, scope)


def test_salts_scope_the_blocks_unless_the_scope_is_global():
    tenant = ServedModel("m", 4096, TOKENIZER, scope_model="p")
    shared = ServedModel("m", 4096, TOKENIZER, scope_model="p", honour_salts=False)
    a, b = _scope(tenant, cache_salt="a"), _scope(tenant, cache_salt="b")
    assert _hashes(a) != _hashes(b) and a.cache_salt == "a"
    ga, gb = _scope(shared, cache_salt="a"), _scope(shared, cache_salt="b")
    assert _hashes(ga) == _hashes(gb) == _hashes(_scope(shared))
    with pytest.raises(ApiError, match="cache_salt"):  # still checked when ignored
        _scope(shared, cache_salt="")


def test_a_lora_adapter_named_as_the_model_scopes_its_blocks():
    served = ServedModel(
        "m", 4096, TOKENIZER, scope_model="p", loras=("x", "y"), honour_salts=False
    )
    x, y, base = _scope(served, model="x"), _scope(served, model="y"), _scope(served, model="m")
    assert (x.lora, y.lora, base.lora) == ("x", "y", None)
    assert len({tuple(_hashes(s)) for s in (x, y, base)}) == 3
    with pytest.raises(ApiError, match="Valid aliases: m, x, y"):
        _scope(served, model="z")


def test_the_config_names_its_scopes_and_adapters():
    config = EngineConfig(cache_scope="global", lora_modules="team-a, team-b")
    config.validate()
    assert config.lora_names == ("team-a", "team-b")
    with pytest.raises(InputError, match="cache_scope"):
        EngineConfig(cache_scope="shared").validate()
    with pytest.raises(InputError, match="lora_modules"):
        EngineConfig(lora_modules="llama-3.1-8b").validate()
