"""The sampler's shared draws: repeating a prompt repeats its stream, memo or not."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from simengine import sampler as sampler_mod
from simengine.sampler import Sampler, TokenStream
from simengine.tokenizer import EOS_ID


def _alone(stream: TokenStream) -> TokenStream:
    """The same stream drawing every block itself (no shared memo)."""
    return TokenStream(
        stream._dist_key, stream._sample_key, stream._temperature, stream._words,
        stream.eos_position,
    )  # fmt: skip


@pytest.mark.parametrize("kept", [sampler_mod.DRAWS_KEPT, 2])
def test_streams_sharing_draws_equal_streams_drawing_alone(monkeypatch, kept):
    monkeypatch.setattr(sampler_mod, "DRAWS_KEPT", kept)
    rng = np.random.default_rng(3)
    sampler = Sampler(seed=9, vocab_size=3000)
    prompts = [rng.integers(3, 3000, size=30) for _ in range(4)]
    streams = []
    for i in range(24):
        shared = sampler.stream(
            prompts[i % 4], temperature=(0.0, 1.0, 0.6)[i % 3], seed=None if i % 2 else 4,
            ignore_eos=i % 5 == 0, max_tokens=700,
        )  # fmt: skip
        streams.append((shared, _alone(shared)))
    for position in range(0, 700, 3):  # interleaved: each stream re-draws after the others
        for shared, alone in streams:
            assert shared.token(position) == alone.token(position)
            assert shared.token_ids(position, 5) == alone.token_ids(position, 5)
            assert shared.top_logprobs(position, 4) == alone.top_logprobs(position, 4)
            ids = array("q", [1])  # appended after what a sequence holds, as int64
            shared.append_ids(ids, position, 300)
            assert ids.tolist() == [1, *alone.token_ids(position, 300)]
    assert 0 < len(sampler.draws) <= kept + 1
    # streams ending inside a drawn block end in EOS there, whichever stream drew it
    ends = [s for s, _ in streams if s.eos_position is not None and s.eos_position < 700]
    assert ends
    assert all(s.token(s.eos_position)[0] == EOS_ID for s in ends)
