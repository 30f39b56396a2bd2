"""Multi-turn sessions at run time: real histories and their expected cache hits.

Turn k >= 1 of a session cannot be built before the run: its prompt is the previous
turn's full prompt, plus the token ids the server *returned* for it, plus the turn's own
new tokens (all its spec holds). The book keeps, per session, the last full prompt and
what came back, and composes the next one when it is released.

Expected cached tokens of such a turn come from an online prefix oracle (the same model
the plan's offline expectations come from) fed every prompt in the order it is sent;
other requests keep the plan's precomputed value.
"""

from __future__ import annotations

from typing import Any, Protocol

from workloads.plan import Plan, RequestSpec


class Oracle(Protocol):
    def expect(self, tokens: Any, scope: Any) -> int: ...

    def record(self, tokens: Any, scope: Any) -> None: ...


class SessionBook:
    def __init__(self, plan: Plan, model: str, oracle: Oracle | None = None) -> None:
        self.model = model
        self._turns: dict[tuple[int, int], RequestSpec] = {
            (spec.session, spec.turn): spec
            for spec in plan
            if spec.session is not None and spec.turn is not None
        }
        self._has_later = any(turn >= 1 for _, turn in self._turns)
        self.oracle = oracle if self._has_later else None
        self._history: dict[int, list[int]] = {}

    @staticmethod
    def is_later_turn(spec: RequestSpec) -> bool:
        return spec.session is not None and (spec.turn or 0) >= 1

    def next_turn(self, spec: RequestSpec) -> RequestSpec | None:
        if spec.session is None or spec.turn is None:
            return None
        return self._turns.get((spec.session, spec.turn + 1))

    def has_next(self, spec: RequestSpec) -> bool:
        return self.next_turn(spec) is not None

    def prompt_ids(self, spec: RequestSpec, vocab_size: int) -> list[int]:
        """The token ids to send: the spec's own, after the session's history for later turns."""
        own = spec.prompt.token_ids(vocab_size).tolist()
        if not self.is_later_turn(spec):
            return own
        return self._history.get(spec.session, []) + own

    def expected_cached(self, spec: RequestSpec, prompt: list[int] | str) -> int | None:
        """The oracle's expectation for a later turn; the plan's value for the rest."""
        if self.oracle is None or not isinstance(prompt, list):
            return spec.expected_cached_tokens
        scope = spec.scope(self.model)
        expected = self.oracle.expect(prompt, scope)
        self.oracle.record(prompt, scope)
        return expected if self.is_later_turn(spec) else spec.expected_cached_tokens

    def ended(self, spec: RequestSpec, prompt: list[int] | str, returned: list[int] | None) -> None:
        """A turn ended: remember its full prompt and what it returned for the next turn."""
        if spec.session is None or not isinstance(prompt, list) or not self.has_next(spec):
            return
        self._history[spec.session] = prompt + list(returned or [])
