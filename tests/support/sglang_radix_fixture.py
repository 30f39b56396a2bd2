"""Record what SGLang's own ``RadixCache`` finds cached, request by request, as a fixture.

Run with the Python of the SGLang target's venv (``targets/sglang-cpu.sh setup``), from
the repository root::

    ~/.cache/prefillscope-targets/sglang/venv/bin/python tests/support/sglang_radix_fixture.py \
        tests/fixtures/sglang/radix-cached-tokens.json

SGLang's server cannot start on this machine kind (see ``tests/fixtures/sglang/README.md``),
but its radix cache imports as a library: ``sglang.srt.mem_cache.radix_cache.RadixCache``
in its simulation mode (``RadixCache.create_simulated``: no memory pools), with a
counting stand-in for the KV allocator that SGLang's ``evict`` frees into. Each scenario's
requests go through it one at a time, as SGLang's scheduler treats a request that runs
alone (``managers/schedule_batch.py``, ``mem_cache/common.py``, ``mem_cache/radix_cache.py``
of the installed release):

1. match the prompt but its last token (``_compute_max_prefix_len``: ``input_len - 1``)
   under the request's ``extra_key``; the match length is its ``cached_tokens``;
2. lock the matched path, evict (least recently used leaves first) what the pool of
   ``pool_tokens`` cannot hold of the tokens it still has to compute, prompt and output
   but the last token;
3. on finishing, ``checkpoint(..., split_prompt=True)``: insert the prompt and output but
   the last token, then the prompt alone (a split at the prompt boundary), and unlock.

The sequences are our oracle's (``workloads.oracle.replay_sequence``: the prompt and a
stand-in for the answer), so both sides see the same token ids; the fixture keeps them,
so the check needs neither SGLang nor the plan generator of the day it was made.
"""

from __future__ import annotations

import json
import sys
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import importlib.metadata  # noqa: E402

from workloads.build import build_plan  # noqa: E402
from workloads.oracle import replay_sequence  # noqa: E402
from workloads.spec import load_spec  # noqa: E402

VOCAB_SIZE = 8192
#: The request sets: name -> (workload, overrides, tenants); ``tenants`` > 1 gives
#: request i the ``extra_key`` ``tenant-{i % tenants}``.
SEQUENCES = {
    "system-prompt-24": (
        "system-prompt",
        {
            "num_requests": 24,
            "seed": 3,
            "prefix_len": "uniform:300-1400",
            "output_len": 8,
        },
        1,
    ),
    "system-prompt-16-two-tenants": (
        "system-prompt",
        {
            "num_requests": 16,
            "seed": 5,
            "prefix_len": "uniform:200-600",
            "output_len": 4,
        },
        2,
    ),
}
#: (scenario, request set, pool_tokens: the KV pool, None for one that never fills).
SCENARIOS = [
    ("shared-prefix", "system-prompt-24", None),
    ("shared-prefix-evicting", "system-prompt-24", 3000),
    ("two-tenants", "system-prompt-16-two-tenants", None),
]  # fmt: skip


class CountingAllocator:
    """What ``RadixCache`` needs of a KV allocator: a device, and ``free_segment``."""

    device = "cpu"
    page_size = 1

    def __init__(self) -> None:
        self.freed = 0

    def free_segment(self, indices, start_pos: int = 0) -> None:
        self.freed += len(indices)


def sequences(workload: str, overrides: dict[str, object], tenants: int) -> list[dict]:
    plan = build_plan(load_spec(workload, overrides))
    out = []
    for i, request in enumerate(plan.requests):
        recorded = replay_sequence(plan, request, request.prompt)
        out.append({
            "id": request.id,
            "extra_key": f"tenant-{i % tenants}" if tenants > 1 else None,
            "prompt_len": len(request.prompt),
            "tokens": [int(t) for t in recorded.token_ids(VOCAB_SIZE)],
        })  # fmt: skip
    return out


def sglang_cached_tokens(requests: list[dict], pool_tokens: int | None) -> list[int]:
    """Each request's ``cached_tokens`` by SGLang's own tree, requests run one at a time."""
    from sglang.srt.mem_cache.base_prefix_cache import (
        EvictParams,
        InsertParams,
        MatchPrefixParams,
    )
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

    allocator = CountingAllocator()
    cache = RadixCache.create_simulated(mock_allocator=allocator)
    cached = []
    for request in requests:
        tokens, n, extra = request["tokens"], request["prompt_len"], request["extra_key"]
        key = RadixKey(array("q", tokens[: n - 1]), extra_key=extra)
        match = cache.match_prefix(MatchPrefixParams(key=key))
        hit = match.device_prefix_len
        cached.append(hit)
        cache.inc_lock_ref(match.last_device_node)
        if pool_tokens is not None:
            need = len(tokens) - hit
            free = pool_tokens - cache.total_size()
            if need > free:
                cache.evict(EvictParams(num_tokens=need - free))
            assert len(tokens) - hit <= pool_tokens - cache.total_size(), "pool too small"
        cache.insert(InsertParams(key=RadixKey(array("q", tokens), extra_key=extra)))
        cache.insert(InsertParams(key=RadixKey(array("q", tokens[:n]), extra_key=extra)))
        cache.dec_lock_ref(match.last_device_node)
    return cached


def main(out: str) -> None:
    doc = {
        "made_by": "tests/support/sglang_radix_fixture.py",
        "sglang": importlib.metadata.version("sglang"),
        "cache": "sglang.srt.mem_cache.radix_cache.RadixCache.create_simulated (page_size 1)",
        "vocab_size": VOCAB_SIZE,
        "sequences": {},
        "scenarios": [],
    }
    for name, (workload, overrides, tenants) in SEQUENCES.items():
        requests = sequences(workload, overrides, tenants)
        doc["sequences"][name] = {
            "workload": workload,
            "overrides": overrides,
            "requests": requests,
        }
    for name, sequence_set, pool_tokens in SCENARIOS:
        hits = sglang_cached_tokens(doc["sequences"][sequence_set]["requests"], pool_tokens)
        doc["scenarios"].append({
            "name": name, "sequences": sequence_set, "pool_tokens": pool_tokens,
            "sglang_cached_tokens": hits,
        })  # fmt: skip
        print(f"{name}: cached per request {hits}")
    Path(out).write_text(json.dumps(doc, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
