"""The flavour registry (``loadgen.flavours``): each entry's facts hold together, and the
tables that once repeated them (capabilities, default API, detection order, owners,
mapping files, launch templates) are read from it."""

from __future__ import annotations

import pytest

from loadgen.flavours import (
    BY_NAME,
    GENERIC,
    MAPPED,
    NAMES,
    REGISTRY,
    by_owner,
    default_cache_model,
    flavour,
)
from loadgen.target import APIS, REQUEST_PATHS, Target
from probes.mapping import BUILTIN_FLAVOURS, MAPPINGS_DIR, builtin_mapping
from workloads.errors import InputError
from workloads.tokenizer import SERVED_TOKENIZERS


def test_every_entry_is_complete_and_its_files_exist():
    assert len(set(NAMES)) == len(REGISTRY) and REGISTRY[-1] is GENERIC
    for kind in REGISTRY:
        assert kind.default_api in APIS
        assert kind.cache_model in ("blocks", "radix", "slots")
        if kind.mapping is not None:
            assert (MAPPINGS_DIR / f"{kind.mapping}.toml").is_file()
            assert builtin_mapping(kind.name).detect, kind.name
        if kind.tokenize:
            assert kind.tokenize_dialect in SERVED_TOKENIZERS
        if kind.capabilities.native_api:
            assert REQUEST_PATHS[kind.capabilities.native_api] == kind.capabilities.native_path


def test_detection_order_is_the_registrys_with_the_embedded_engine_before_vllm():
    assert BUILTIN_FLAVOURS == MAPPED
    assert MAPPED.index("embedded") < MAPPED.index("vllm")


def test_cache_models_per_server():
    assert [default_cache_model(n) for n in ("vllm", "embedded", "sglang", "llamacpp")] == [
        "blocks",
        "blocks",
        "radix",
        "slots",
    ]
    assert default_cache_model(None) == default_cache_model("tgi") == "blocks"


def test_owners_flags_and_an_unknown_name():
    assert by_owner("prefillscope") is BY_NAME["embedded"] and by_owner("x") is None
    assert BY_NAME["llamacpp"].chunk_setting(256) == "--batch-size 256 --ubatch-size 256"
    assert BY_NAME["sglang"].chunk_flags == ("--chunked-prefill-size",)
    assert BY_NAME["embedded"].chunk_setting(64) == "--engine max_num_batched_tokens=64"
    with pytest.raises(InputError, match="--backend") as error:
        flavour("tgi")
    assert "llamacpp" in str(error.value)


def test_a_target_reads_its_capabilities_and_paths_from_its_entry():
    llama = Target("http://h:1", "llamacpp", "chat", "m")
    assert llama.capabilities.erase_slots and llama.paths()["chat_template"] == "/apply-template"
    assert "chat_template" not in Target("http://h:1", "vllm", "chat", "m").paths()
    with pytest.raises(InputError, match="needs a sglang server"):
        Target("http://h:1", "vllm", "sglang", "m")
