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
"""

from __future__ import annotations

from workloads.multi_turn import next_prompt
from workloads.oracle import PrefixOracle
from workloads.plan import Plan, Prompt, RequestSpec, Segment

FullPrompt = Prompt | str


class SessionBook:
    def __init__(self, plan: Plan, model: str, oracle: PrefixOracle | None = None) -> None:
        self.model = model
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

    def expected_cached(self, spec: RequestSpec) -> int | None:
        """The online oracle's expectation for a later turn; the plan's for the rest."""
        full = self._full.get(spec.id)
        if self.oracle is None or not isinstance(full, Prompt) or not self.is_later_turn(spec):
            return spec.expected_cached_tokens
        return self.oracle.expect(full, spec.scope(self.model))

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
        if self.oracle is not None and isinstance(full, Prompt):
            kept = ids[:-1]  # the last output token never enters the KV cache
            unknown = 0 if ids else max(0, (output_tokens or 0) - 1)
            self.oracle.record(
                full.extended(Segment(len(kept), tokens=tuple(kept))),
                spec.scope(self.model),
                prompt_len=len(full),
                extra_tokens=unknown,
            )
        if spec.session is None or not self.has_next(spec):
            return
        answer = (returned_text or "") if isinstance(full, str) else ids
        self._history[spec.session] = (full, answer)
