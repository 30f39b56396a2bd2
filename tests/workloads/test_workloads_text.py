"""Text prompts of exact token counts, through a real BPE tokenizer locally and over HTTP."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from workloads_util import TokenizeServer, train_tokenizer

from workloads.build import build_plan
from workloads.errors import InputError
from workloads.plan import Plan
from workloads.spec import load_spec
from workloads.tokenizer import LocalTokenizer, ServerTokenizer, load_tokenizer

VOCAB = 32000


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def local(tokenizer_path: Path) -> LocalTokenizer:
    return LocalTokenizer(tokenizer_path)


def _text_plan(tokenizer: object, workload: str = "shared-prefix", **overrides: object) -> Plan:
    return build_plan(load_spec(workload, {"prompt_format": "text", **overrides}), tokenizer)


def test_text_has_the_planned_token_count_as_the_server_counts(local: LocalTokenizer) -> None:
    plan = _text_plan(
        local,
        groups=3,
        requests_per_group=4,
        prefix_len="uniform:50-400",
        suffix_len="uniform:1-60",
    )
    token_plan = build_plan(
        load_spec(
            "shared-prefix",
            {
                "groups": 3,
                "requests_per_group": 4,
                "prefix_len": "uniform:50-400",
                "suffix_len": "uniform:1-60",
            },
        )
    )
    for r, planned in zip(plan, token_plan, strict=True):
        ids = local.encode(r.text)
        assert ids[0] == 1  # the <s> the server prepends is part of the count
        assert len(ids) == len(planned.prompt) == len(r.prompt)
        assert r.prompt.token_ids(VOCAB).tolist() == ids


def test_shared_prefixes_stay_token_exact_in_text(local: LocalTokenizer) -> None:
    plan = _text_plan(local, groups=4, requests_per_group=5, prefix_len=300, suffix_len=30)
    by_group: dict[int, set[bytes]] = {}
    for r in plan:
        ids = np.asarray(local.encode(r.text))
        by_group.setdefault(r.group, set()).add(ids[:300].tobytes())
    assert all(len(prefixes) == 1 for prefixes in by_group.values())
    assert len({next(iter(p)) for p in by_group.values()}) == 4


def test_multi_turn_follow_ups_are_text_without_special_tokens(local: LocalTokenizer) -> None:
    plan = _text_plan(local, "multi-turn", num_requests=6, turns=3)
    for r in plan:
        ids = local.encode(r.text, special=not r.turn)
        assert len(ids) == len(r.prompt)
        assert (ids[0] == 1) == (r.turn == 0)


def test_long_text_prompt(local: LocalTokenizer) -> None:
    plan = _text_plan(local, "long-prompt", num_requests=1, prompt_len=5000)
    assert len(local.encode(plan.requests[0].text)) == 5000


def test_server_tokenize_gives_the_same_text(tokenizer_path: Path, local: LocalTokenizer) -> None:
    overrides = {"groups": 2, "requests_per_group": 3, "prefix_len": 120, "suffix_len": 15}
    with TokenizeServer(tokenizer_path) as server:
        remote = load_tokenizer(server.url + "/v1")
        assert isinstance(remote, ServerTokenizer)
        plan = _text_plan(remote, **overrides)
        calls = server.calls
        remote.close()
    assert calls > 0
    assert [r.text for r in plan] == [r.text for r in _text_plan(local, **overrides)]
    assert all(len(local.encode(r.text)) == 135 for r in plan)


def test_tokenizer_problems_are_input_errors(tmp_path: Path, tokenizer_path: Path) -> None:
    with pytest.raises(InputError) as info:
        build_plan(load_spec("shared-prefix", {"prompt_format": "text"}))
    assert info.value.field == "prompt_format"
    with pytest.raises(InputError, match="not found"):
        load_tokenizer(str(tmp_path / "none"))
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{}")
    with pytest.raises(InputError, match="cannot load"):
        LocalTokenizer(tmp_path)
    with TokenizeServer(tokenizer_path) as server:
        url = server.url
        with pytest.raises(InputError, match="HTTP 404"):
            ServerTokenizer(url + "/nothing-here").encode("x")
    with pytest.raises(InputError, match="unreachable"):
        ServerTokenizer(url, timeout_s=2).encode("x")
