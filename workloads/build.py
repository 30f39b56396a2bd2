"""``build_plan``: a resolved spec (and, for text prompts, a tokenizer) → a plan."""

from __future__ import annotations

from workloads.errors import InputError
from workloads.limits import MAX_SECONDS
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
    check_span(plan)
    if spec.prompt_format == "text":
        assert tokenizer is not None
        return render_text(plan, tokenizer)
    return plan


def check_span(plan: Plan) -> None:
    """Refuse a plan whose last intended send is beyond ``MAX_SECONDS`` (a rate of
    ``1e-300`` sends its second request 10^300 s in: no clock keeps time that far, and no
    run lasts it)."""
    times = plan.requests.column("intended_s")
    last = max((t for t in times if t is not None), default=0.0)
    if not last <= MAX_SECONDS:  # NaN too
        raise InputError(
            "rate",
            f"the plan's last request would be sent {last:.3g} s after the start, beyond "
            f"a week ({MAX_SECONDS:g} s)",
            "raise --rate (or time_scale) or send fewer requests",
        )
