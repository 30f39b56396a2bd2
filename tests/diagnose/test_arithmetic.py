"""``diagnose.arithmetic``: the figures a diagnosis quotes, against hand-worked answers."""

from __future__ import annotations

import pytest

from diagnose.arithmetic import kv_transfer, prefill_chunks, prefix_reuse
from perfmodel.chunking import PrefillBlocked
from workloads.errors import InputError


def test_a_prompt_is_sliced_by_what_the_decodes_leave_of_the_budget():
    assert prefill_chunks(4096, 1024, 0) == [1024, 1024, 1024, 1024]
    assert prefill_chunks(2048, 512, 4) == [508, 508, 508, 508, 16]
    with pytest.raises(PrefillBlocked):
        prefill_chunks(100, 8, 8)


def test_prefix_reuse_counts_full_blocks_and_the_pairs_it_skips():
    # 64 cached of 100 at block 16: 4 blocks; the 36 fresh tokens attend to the 64 cached
    # (2,304 pairs) and causally to themselves (36·37/2 = 666); all 100 alone: 5,050.
    reuse = prefix_reuse(100, 70, 16, params=1e9)
    assert (reuse.reused_blocks, reuse.cached_tokens, reuse.fresh_tokens) == (4, 64, 36)
    assert (reuse.pairs_suffix_prefix, reuse.pairs_suffix_suffix) == (2304, 666)
    assert (reuse.pairs_total, reuse.pairs_full, reuse.pairs_skipped) == (2970, 5050, 2080)
    assert reuse.linear_flops == 2.0 * 1e9 * 36


def test_the_last_prompt_token_is_always_recomputed():
    whole = prefix_reuse(64, 64, 16)  # all 64 cached would leave nothing to sample from
    assert (whole.cached_tokens, whole.fresh_tokens) == (48, 16)
    assert prefix_reuse(64, 0, 16).pairs_skipped == 0


def test_kv_transfer_bytes_and_ideal_time():
    # 2 (K and V) · 32 layers · 8 heads · 128 dims · 2 bytes = 131,072 bytes a token
    moved = kv_transfer(32, 8, 128, "bf16", 1000, link_gbps=100)
    assert (moved.bytes_per_token, moved.total_bytes) == (131_072, 131_072_000)
    assert moved.transfer_seconds == pytest.approx(131_072_000 * 8 / 100e9)
    assert kv_transfer(1, 1, 1, "fp32", 1).transfer_seconds is None


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: prefill_chunks(0, 512, 0), "--prompt"),
        (lambda: prefill_chunks(10, 512, -1), "--decodes"),
        (lambda: prefix_reuse(10, -1, 16), "--cached-prefix"),
        (lambda: prefix_reuse(10, 0, 0), "--block-size"),
        (lambda: kv_transfer(32, 0, 128, "bf16", 10), "--kv-heads"),
        (lambda: kv_transfer(32, 8, 128, "fp7", 10), "--dtype"),
        (lambda: kv_transfer(32, 8, 128, "bf16", 10, link_gbps=0), "--link-gbps"),
    ],
)
def test_bad_input_names_the_flag(call, field):
    with pytest.raises(InputError) as err:
        call()
    assert err.value.field == field
