"""Multi-turn sessions at run time: real histories and their expected cache hits.

Turn k >= 1 of a session cannot be built before the run: its prompt is the previous
turn's full prompt, plus what the server *returned* for it, plus the turn's own new
tokens (all its spec holds). ``workloads.multi_turn.next_prompt`` composes token
prompts; a text prompt (chat) is composed the same way from the returned text.

Expected cached tokens of such a turn come from an online ``PrefixOracle`` (the model
the plan's offline expectations come from): when the run has later turns and an oracle,
every request's full prompt is ``expect``-ed when it is sent and ``record``-ed, with
its returned tokens, when it ends, in the order that really happened. Requests other
than later turns keep the plan's precomputed value.

A text history (the chat API, text completions) is made of what the server said, so
the token ids the server sees for it are only known by tokenizing it the server's way:
``text_tokens`` (the server's ``/tokenize``, the chat template applied for chat) does
that in the turn's think time, off the event loop (``settle``). The plan's token ids of
a text request are then taken as the server's (the runner made them so); without
``text_tokens`` a text later turn's expectation is unknown, never a guess.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from workloads.multi_turn import next_prompt
from workloads.oracle import PrefixOracle
from workloads.plan import Plan, Prompt, RequestSpec, Segment

FullPrompt = Prompt | str


class SessionBook:
    def __init__(
        self,
        plan: Plan,
        model: str,
        oracle: PrefixOracle | None = None,
        text_tokens: Callable[[str], list[int]] | None = None,
    ) -> None:
        self.model = model
        self.text_tokens = text_tokens
        self._ids: dict[str, Prompt] = {}  # request id -> a text prompt's server token ids
        self._turns: dict[tuple[int, int], RequestSpec] = {
            (spec.session, spec.turn): spec
            for spec in plan
            if spec.session is not None and spec.turn is not None
        }
        has_later = any(turn >= 1 for _, turn in self._turns)
        self.oracle = oracle if has_later else None
        # session -> the last turn's full prompt and what the server returned for it
        self._history: dict[int, tuple[FullPrompt, list[int] | str]] = {}
        self._full: dict[str, FullPrompt] = {}  # request id -> its full prompt, until it ends

    @staticmethod
    def is_later_turn(spec: RequestSpec) -> bool:
        return spec.session is not None and (spec.turn or 0) >= 1

    def next_turn(self, spec: RequestSpec) -> RequestSpec | None:
        if spec.session is None or spec.turn is None:
            return None
        return self._turns.get((spec.session, spec.turn + 1))

    def has_next(self, spec: RequestSpec) -> bool:
        return self.next_turn(spec) is not None

    def full_prompt(self, spec: RequestSpec) -> FullPrompt:
        """What ``spec`` sends: its own prompt, or for a later turn the session's history
        followed by its own (token ids, or text when the plan sends text)."""
        full: FullPrompt = spec.text if spec.text is not None else spec.prompt
        history = self._history.get(spec.session) if self.is_later_turn(spec) else None
        if history is not None:
            previous, answer = history
            if isinstance(previous, str):
                full = previous + str(answer) + (spec.text or "")
            else:
                full = next_prompt(previous, list(answer), spec)
        self._full[spec.id] = full
        return full

    async def settle(self, spec: RequestSpec) -> int | None:
        """Tokenize a later turn's composed text the server's way (``text_tokens``, in a
        thread); returns its token count, ``None`` when there is nothing to do."""
        full = self._full.get(spec.id)
        if not isinstance(full, str) or self.text_tokens is None or self.oracle is None:
            return None
        ids = await asyncio.to_thread(self.text_tokens, full)
        self._ids[spec.id] = Prompt.of_tokens(ids)
        return len(ids)

    def _token_prompt(self, spec: RequestSpec, full: FullPrompt | None) -> Prompt | None:
        """The token ids the server sees for ``spec``'s full prompt, when known."""
        if isinstance(full, Prompt):
            return full
        if self.text_tokens is None:
            return None
        return self._ids.get(spec.id) if self.is_later_turn(spec) else spec.prompt

    def expected_cached(self, spec: RequestSpec) -> int | None:
        """The online oracle's expectation for a later turn; the plan's for the rest."""
        if self.oracle is None or not self.is_later_turn(spec):
            return spec.expected_cached_tokens
        tokens = self._token_prompt(spec, self._full.get(spec.id))
        return None if tokens is None else self.oracle.expect(tokens, spec.scope(self.model))

    def ended(
        self,
        spec: RequestSpec,
        returned_ids: list[int] | None,
        returned_text: str | None,
        output_tokens: int | None,
    ) -> None:
        """A request ended: its blocks join the oracle's cache; a turn's answer joins its
        session's history for the next turn."""
        full = self._full.pop(spec.id, None)
        if full is None:
            return
        ids = list(returned_ids or [])
        tokens = self._token_prompt(spec, full)
        self._ids.pop(spec.id, None)
        if self.oracle is not None and tokens is not None:
            kept = ids[:-1]  # the last output token never enters the KV cache
            unknown = 0 if ids else max(0, (output_tokens or 0) - 1)
            self.oracle.record(
                tokens.extended(Segment(len(kept), tokens=tuple(kept))),
                spec.scope(self.model),
                prompt_len=len(tokens),
                extra_tokens=unknown,
            )
        if spec.session is None or not self.has_next(spec):
            return
        answer = (returned_text or "") if isinstance(full, str) else ids
        self._history[spec.session] = (full, answer)
