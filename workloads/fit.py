"""Whether a plan's requests fit the server's context: prompt + output <= max_model_len.

A server refuses a request whose prompt and ``max_tokens`` together exceed its
``max_model_len`` (vLLM: HTTP 400 "This model's maximum context length is …"). Sending
such requests measures nothing but the refusal, so a run is refused before it starts
unless the user asks for them (``--allow-overlong``).

A later turn of a multi-turn session carries the whole history, which is only known at
run time; it is counted with every earlier answer at its full ``max_tokens`` (exact when
the server ignores end-of-sequence, as the load generator asks it to, an upper bound
otherwise).
"""

from __future__ import annotations

from workloads.errors import InputError
from workloads.multi_turn import assumed_prompts
from workloads.plan import Plan, RequestSpec


def sequence_length(request: RequestSpec, full_prompt_len: int) -> int:
    """Tokens the server must hold for ``request``: its full prompt and its output."""
    return full_prompt_len + request.max_tokens


def overlong(plan: Plan, max_model_len: int) -> list[tuple[RequestSpec, int]]:
    """The requests of ``plan`` longer than ``max_model_len``, with their lengths."""
    columns = plan.requests.column("session"), plan.requests.column("turn")
    sessions = any(s is not None and t for s, t in zip(*columns, strict=True))
    full = assumed_prompts(plan) if sessions else {}
    out = []
    for r in plan:
        prompt = full.get(r.id, r.prompt) if sessions else r.prompt
        n = sequence_length(r, len(prompt))
        if n > max_model_len:
            out.append((r, n))
    return out


def refuse_overlong(plan: Plan, max_model_len: int, source: str) -> None:
    """Raise ``InputError`` (one line: how many, the longest, the limit) if any request
    of ``plan`` cannot fit ``max_model_len`` tokens (as ``source`` said)."""
    too_long = overlong(plan, max_model_len)
    if not too_long:
        return
    longest = max(n for _, n in too_long)
    raise InputError(
        "--allow-overlong",
        f"{len(too_long):,} of {len(plan):,} requests need more than the server's "
        f"max_model_len of {max_model_len:,} tokens (prompt + max output; longest "
        f"{longest:,}; limit from {source})",
        "shorten the prompts or outputs (--set KEY=VALUE), "
        "or pass --allow-overlong to send them anyway",
    )
