"""Chunked prefill's arithmetic: what a step's token budget leaves prompts beside decodes.

The scheduler spends each step's budget (``max_num_batched_tokens``) on running decodes
first, one token each, and slices prompts into chunks from what is left; ``prefillscope
calc chunks`` shows the same slicing. Kept apart from the scheduler so that the
arithmetic is importable without numpy.
"""

from __future__ import annotations


class PrefillBlocked(ValueError):
    """Running decodes use the whole token budget, so no prompt chunk can be scheduled."""


def prefill_allowance(budget: int, num_decodes: int) -> int:
    """Tokens a step has left for prompt chunks after each running decode took one."""
    return max(0, budget - num_decodes)


def chunk_schedule(prompt_tokens: int, budget: int, num_decodes: int) -> list[int]:
    """The chunks a prompt is sliced into while ``num_decodes`` sequences keep decoding.

    Budget 512 with 4 decodes slices 2048 tokens as ``[508, 508, 508, 508, 16]``. Raises
    PrefillBlocked when the decodes leave nothing: the prompt would wait, not shrink.
    """
    available = prefill_allowance(budget, num_decodes)
    if available == 0:
        raise PrefillBlocked(
            f"{num_decodes} decodes use the whole budget of {budget} tokens, "
            "so no prompt token is scheduled until some finish"
        )
    full, rest = divmod(prompt_tokens, available)
    return [available] * full + ([rest] if rest else [])
