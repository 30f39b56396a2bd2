"""``diagnose ab --launch`` templates take every server's own budget flags
(``loadgen.flavours``): ``{chunk}`` may be the value of several flags, the flags it sets
are read back for the view, and a template that sets a known budget flag to a number is
refused with the word to write."""

from __future__ import annotations

import pytest

from loadgen.flavours import REGISTRY
from session.launcher import LaunchTemplate
from workloads.errors import InputError


def test_every_registered_launch_template_parses_and_sets_its_own_flags():
    for kind in REGISTRY:
        if kind.launch is None:
            continue
        template = LaunchTemplate.parse(kind.launch_template("M"))
        assert template.chunk_flags() == list(kind.chunk_flags), kind.name
        argv = template.command(384, 8123)
        for flag in kind.chunk_flags:
            assert argv[argv.index(flag) + 1] == "384"
        assert argv[argv.index("--port") + 1] == "8123"


def test_a_llamacpp_template_with_batch_size_chunk_fills_each_flag():
    template = LaunchTemplate.parse(
        "llama-server -m m.gguf -np 4 --batch-size {chunk} -ub={chunk} --port {port}"
    )
    assert template.chunk_flags() == ["--batch-size", "-ub"]
    assert template.command(256, 9000) == [
        "llama-server", "-m", "m.gguf", "-np", "4", "--batch-size", "256", "-ub=256",
        "--port", "9000",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("llama-server -m m --batch-size 2048 --port {port}", "write --batch-size {chunk}"),
        (
            "python -m sglang.launch_server --chunked-prefill-size 4096 --port {port}",
            "write --chunked-prefill-size {chunk}",
        ),
        ("serve --port {port}", "llama.cpp --batch-size {chunk} --ubatch-size {chunk}"),
    ],
)
def test_a_template_without_chunk_is_told_the_flag_to_give_it(text, hint):
    with pytest.raises(InputError, match=r"the command has no \{chunk\}") as error:
        LaunchTemplate.parse(text)
    assert hint in str(error.value)
