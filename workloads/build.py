"""``build_plan``: a resolved spec (and, for text prompts, a tokenizer) → a plan."""

from __future__ import annotations

from workloads.errors import InputError
from workloads.plan import Plan
from workloads.spec import WorkloadSpec
from workloads.text import render_text
from workloads.tokenizer import Tokenizer


def build_plan(spec: WorkloadSpec, tokenizer: Tokenizer | None = None) -> Plan:
    """The deterministic plan of ``spec`` for its seed.

    With ``prompt_format="text"`` every prompt is rendered as text of exactly its token
    count with ``tokenizer`` (the target's), shared prefixes token for token.
    """
    if spec.prompt_format == "text" and tokenizer is None:
        raise InputError(
            "prompt_format", "text prompts need the target's tokenizer", "give --tokenizer"
        )
    plan = spec.family.build(spec, tokenizer)
    if spec.prompt_format == "text":
        assert tokenizer is not None
        return render_text(plan, tokenizer)
    return plan
