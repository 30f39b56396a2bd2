"""Text prompts of an exact token count, with shared prefixes kept token for token.

Some APIs (chat, most non-vLLM servers) take text, not token ids. A prompt is rendered
segment by segment: each segment becomes words drawn from its key (so equal segments
give equal text) until the next word would overshoot, then single-token fillers up to
the exact count, every piece starting with a space so that tokenizers which split at
spaces (byte-level BPE, Llama-3's, SentencePiece with a metaspace, the embedded
engine's) cannot merge tokens across a segment boundary. Then the whole prompt is
tokenized the way the server will and checked: the total must be exact (the unique last
segment absorbs any difference) and the shared part must tokenize identically in every
request of its group — otherwise the text would silently destroy the prefix reuse the
plan promises, and we refuse instead.

The request keeps the server's token ids as its prompt, so the oracle sees exactly
what the server will see.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from workloads.errors import InputError
from workloads.plan import Plan, Prompt, RequestSpec, Segment
from workloads.tokenizer import Tokenizer

#: Plain words for rendered text (one to three tokens each in most vocabularies).
_WORD_TEXT = """
time year people way day man thing woman life child world school state family student
group country problem hand part place case week company system program question work
government number night point home water room mother area money story fact month lot
right study book eye job word business issue side kind head house service friend father
power hour game line end member law car city name team minute idea kid body information
back parent face others level office door health person art war history party result
change morning reason research girl guy moment air teacher force education river garden
market window letter paper music color light stone forest bridge island village winter
summer spring autumn ocean mountain valley engine signal memory cache block token prefix
server model request answer table chair field road train paint voice picture season
table early late small large green quiet rapid simple strong gentle bright careful
"""
WORDS = tuple(dict.fromkeys(_WORD_TEXT.split()))
#: Fillers tried, in order, for topping a segment up one token at a time.
_FILLERS = (" the", " a", " and", " of", " x", ".", ",")
#: Attempts at correcting a segment whose tokens are not additive at piece boundaries.
_ATTEMPTS = 8


class TextRenderer:
    """Renders keyed segments as text with ``tokenizer`` (memoised per segment)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._piece_tokens: dict[str, int] = {}
        self._texts: dict[tuple[int, int], str] = {}
        self._prefix_ids: dict[tuple[Segment, ...], list[int]] = {}
        # Specials counted on a word, not on "": servers refuse an empty prompt.
        word = WORDS[0]
        self.special = len(tokenizer.encode(word, special=True)) - self.count(word)
        self.filler = self._find_filler()

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, special=False))

    def _find_filler(self) -> str:
        base = " " + " ".join(WORDS[:8])
        base_count = self.count(base)
        for filler in _FILLERS:
            if all(self.count(base + filler * j) == base_count + j for j in (1, 2, 3, 7)):
                return filler
        raise InputError("tokenizer", "found no single-token filler text for this tokenizer")

    def _piece(self, word: str) -> int:
        n = self._piece_tokens.get(word)
        if n is None:
            n = self._piece_tokens[word] = self.count(" " + word)
        return n

    def _compose(self, key: int, target: int) -> str:
        """Words of run ``key`` while they fit in ``target`` tokens, then fillers to it."""
        picks = np.random.default_rng(key).integers(len(WORDS), size=target)
        parts: list[str] = []
        total = 0
        for i in picks:
            word = WORDS[int(i)]
            n = self._piece(word)
            if total + n > target:
                break
            parts.append(" " + word)
            total += n
        return "".join(parts) + self.filler * (target - total)

    def segment(self, key: int, length: int) -> str:
        """Text of exactly ``length`` tokens (standalone, no special tokens) for run ``key``."""
        memo = self._texts.get((key, length))
        if memo is not None:
            return memo
        target = length
        for _ in range(_ATTEMPTS):
            text = self._compose(key, max(0, target))
            got = self.count(text) if text else 0
            if got == length:
                self._texts[(key, length)] = text
                return text
            target += length - got
        raise InputError("tokenizer", f"cannot render text of exactly {length} tokens")

    def identity(self, segment: Segment) -> int:
        """The key text is drawn from; explicit-token segments are keyed by their tokens."""
        return segment.key if segment.key is not None else hash(segment.tokens) & (2**63 - 1)

    def render(self, r: RequestSpec) -> tuple[str, Prompt]:
        """``r``'s text and the token ids the server will see for it."""
        follow_up = r.session is not None and bool(r.turn)
        segments = list(r.prompt.segments)
        budget = [s.length for s in segments]
        skip = 0 if follow_up else self.special
        for i in range(len(budget)):
            take = min(skip, budget[i])
            budget[i] -= take
            skip -= take
        if skip:
            raise InputError("prompt_format", f"request {r.id} is shorter than the special tokens")
        texts = [self.segment(self.identity(s), n) for s, n in zip(segments, budget, strict=True)]
        ids: list[int] = []
        for _ in range(_ATTEMPTS):
            text = "".join(texts)
            ids = self.tokenizer.encode(text, special=not follow_up)
            if len(ids) == len(r.prompt):
                break
            budget[-1] += len(r.prompt) - len(ids)
            texts[-1] = self.segment(self.identity(segments[-1]), max(0, budget[-1]))
        else:
            raise InputError(
                "tokenizer", f"cannot render request {r.id} as exactly {len(r.prompt)} tokens"
            )
        shared = len(r.prompt) - segments[-1].length
        self._check_shared(tuple(segments[:-1]), ids[:shared], r.id)
        return text, Prompt(()).extended(
            Segment(shared, tokens=tuple(ids[:shared])),
            Segment(len(ids) - shared, tokens=tuple(ids[shared:])),
        )

    def _check_shared(self, prefix: tuple[Segment, ...], ids: list[int], request_id: str) -> None:
        if not prefix:
            return
        first = self._prefix_ids.setdefault(prefix, ids)
        if first != ids:
            raise InputError(
                "prompt_format",
                f"request {request_id}: this tokenizer merges text across the shared prefix",
                "send token ids (prompt_format=tokens) to keep prefixes exact",
            )


def render_text(plan: Plan, tokenizer: Tokenizer) -> Plan:
    """``plan`` with a text prompt of its exact token count for every request without text."""
    renderer = TextRenderer(tokenizer)
    return replace(plan, requests=(_rendered(r, renderer) for r in plan.requests))


def _rendered(request: RequestSpec, renderer: TextRenderer) -> RequestSpec:
    if request.text is not None or request.messages is not None:
        return request
    text, prompt = renderer.render(request)
    return replace(request, text=text, prompt=prompt)
