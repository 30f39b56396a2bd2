"""The A/B view says which server flag each arm's chunk size set: the flags the ``--launch``
template gives ``{chunk}`` to (llama.cpp's two, SGLang's one), the embedded engine's key,
nothing when the servers were given as ``--a``/``--b``."""

from __future__ import annotations

import shlex

from loadgen.flavours import BY_NAME
from prefillscope.ab_view import chunk_knob
from runfmt.abresult import ABResult


def test_the_knob_is_read_from_the_launch_template_or_the_mode():
    llamacpp = shlex.split(BY_NAME["llamacpp"].launch_template("m.gguf"))
    sglang = shlex.split(BY_NAME["sglang"].launch_template("org/m"))
    assert (
        chunk_knob(ABResult(mode="launch", launch=tuple(llamacpp))) == "--batch-size/--ubatch-size"
    )
    assert chunk_knob(ABResult(mode="launch", launch=tuple(sglang))) == "--chunked-prefill-size"
    assert chunk_knob(ABResult(mode="embedded")) == "max_num_batched_tokens"
    assert chunk_knob(ABResult(mode="endpoints")) is None
