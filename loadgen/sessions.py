"""Multi-turn sessions at run time: real histories, and the prompts they compose.

Turn k >= 1 of a session cannot be built before the run: its prompt is the previous
turn's full prompt, plus what the server *returned* for it, plus the turn's own new
tokens (all its spec holds). ``workloads.multi_turn.next_prompt`` composes token
prompts; a text prompt (chat) is composed the same way from the returned text.

What a later turn sent is kept, as the token ids the server saw (``composed``): the
session's prefix oracle replays the run from it once the run is over
(``session.bench_oracle.RunOracle``); nothing here computes an expectation. A text history (the
chat API, text completions) is made of what the server said, so its token ids are only
known by tokenizing it the server's way: ``text_tokens`` (the server's ``/tokenize``,
the chat template applied for chat) does that in the turn's think time, off the event
loop (``settle``); without it a text later turn's ids are unknown, never a guess.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from workloads.multi_turn import next_prompt
from workloads.plan import Plan, Prompt, RequestSpec

FullPrompt = Prompt | str


class SessionBook:
    def __init__(self, plan: Plan, text_tokens: Callable[[str], list[int]] | None = None) -> None:
        self.text_tokens = text_tokens
        #: request id -> the token ids a later turn sent (its composed history), when known
        self.composed: dict[str, Prompt] = {}
        # (session, turn) -> the request's index in the plan (read from its columns: a
        # turn is built when its session reaches it)
        self._requests = plan.requests
        sessions, turns = plan.requests.column("session"), plan.requests.column("turn")
        self._turns: dict[tuple[int, int], int] = {
            (s, t): i
            for i, (s, t) in enumerate(zip(sessions, turns, strict=True))
            if s is not None and t is not None
        }
        # session -> the last turn's full prompt and what the server returned for it
        self._history: dict[int, tuple[FullPrompt, list[int] | str]] = {}
        self._full: dict[str, FullPrompt] = {}  # request id -> its full prompt, until it ends

    @staticmethod
    def is_later_turn(spec: RequestSpec) -> bool:
        return spec.session is not None and (spec.turn or 0) >= 1

    def next_turn(self, spec: RequestSpec) -> RequestSpec | None:
        if spec.session is None or spec.turn is None:
            return None
        index = self._turns.get((spec.session, spec.turn + 1))
        return None if index is None else self._requests[index]

    def has_next(self, spec: RequestSpec) -> bool:
        """Whether ``spec``'s answer is needed: a next turn composes it into its history."""
        following = self.next_turn(spec)
        return following is not None and following.composes_history

    def full_prompt(self, spec: RequestSpec) -> FullPrompt:
        """What ``spec`` sends: its own prompt, or for a later turn the session's history
        followed by its own (token ids, or text when the plan sends text)."""
        full: FullPrompt = spec.text if spec.text is not None else spec.prompt
        history = self._history.get(spec.session) if spec.composes_history else None
        if history is not None:
            previous, answer = history
            if isinstance(previous, str):
                full = previous + str(answer) + (spec.text or "")
            else:
                full = next_prompt(previous, list(answer), spec)
                self.composed[spec.id] = full
        self._full[spec.id] = full
        return full

    async def settle(self, spec: RequestSpec) -> int | None:
        """Tokenize a later turn's composed text the server's way (``text_tokens``, in a
        thread); returns its token count, ``None`` when there is nothing to do."""
        full = self._full.get(spec.id)
        if not isinstance(full, str) or self.text_tokens is None:
            return None
        ids = await asyncio.to_thread(self.text_tokens, full)
        self.composed[spec.id] = Prompt.of_tokens(ids)
        return len(ids)

    def ended(
        self, spec: RequestSpec, returned_ids: list[int] | None, returned_text: str | None
    ) -> None:
        """A request ended: a turn's answer joins its session's history for the next turn."""
        full = self._full.pop(spec.id, None)
        if full is None or spec.session is None or not self.has_next(spec):
            return
        answer = (returned_text or "") if isinstance(full, str) else list(returned_ids or [])
        self._history[spec.session] = (full, answer)
