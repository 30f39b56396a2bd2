"""``workloads.text``: segments rendered as text of an exact token count, prefixes kept."""

from __future__ import annotations

import pytest
from workloads_util import train_tokenizer

from workloads.plan import Plan, Prompt, RequestSpec, Segment
from workloads.text import TextRenderer, render_text
from workloads.tokenizer import LocalTokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> LocalTokenizer:
    return LocalTokenizer(train_tokenizer(tmp_path_factory.mktemp("tok")))


def test_a_segment_is_exactly_its_length_and_the_same_key_gives_the_same_text(tokenizer):
    renderer = TextRenderer(tokenizer)
    for length in (1, 2, 17, 300):
        text = renderer.segment(42, length)
        assert len(tokenizer.encode(text, special=False)) == length
        assert text.startswith(" ")
    assert renderer.segment(42, 50) == TextRenderer(tokenizer).segment(42, 50)
    assert renderer.segment(42, 50) != renderer.segment(43, 50)


def test_the_bos_token_is_counted_once_per_first_turn(tokenizer):
    renderer = TextRenderer(tokenizer)
    assert renderer.special == 1  # the test tokenizer prepends <s>
    request = RequestSpec("r", Prompt((Segment(40, key=1),)), 8)
    text, prompt = renderer.render(request)
    ids = tokenizer.encode(text, special=True)
    assert len(ids) == len(prompt) == 40
    assert list(prompt.token_ids(tokenizer.vocab_size)) == ids


def test_requests_sharing_a_prefix_render_it_to_the_same_token_ids(tokenizer):
    shared = Segment(64, key=9)
    a = RequestSpec("a", Prompt((shared, Segment(20, key=100))), 4)
    b = RequestSpec("b", Prompt((shared, Segment(35, key=200))), 4)
    plan = render_text(Plan("test", 0, (a, b)), tokenizer)
    ra, rb = plan.requests
    assert (len(ra.prompt), len(rb.prompt)) == (84, 99)
    ids_a = ra.prompt.token_ids(tokenizer.vocab_size)
    ids_b = rb.prompt.token_ids(tokenizer.vocab_size)
    assert list(ids_a[:64]) == list(ids_b[:64])
    assert list(ids_a[64:]) != list(ids_b[64 : 64 + 20])


def test_requests_that_already_have_text_are_left_alone(tokenizer):
    given = RequestSpec("g", Prompt((Segment(3, key=1),)), 4, text="hello there")
    assert render_text(Plan("test", 0, (given,)), tokenizer).requests[0] == given
