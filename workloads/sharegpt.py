"""ShareGPT conversations: what a ShareGPT file's items become before any tokenizer.

A ShareGPT file is a JSON list of ``{"conversations": [{"from": ROLE, "value": TEXT}, …]}``.
A conversation is read as an optional opening ``system`` message (kept as the chat's system
message), then alternating user (``human``/``user``) and assistant (``gpt``/``chatgpt``/
``assistant``/``bard``/``bing``) messages. Each user message with the assistant's answer
after it is one *turn*; reading stops at the first message out of that order, a blank user
message, or an answer that is not text (that turn is kept, the answer's length unknown).
An item with no turn is not a conversation and is skipped.

Turn k of a conversation is sent with its whole recorded history: the system message, the
k earlier user messages and the answers the file records for them, then its own user
message (``Conversation.messages``). The history is the file's, not the server's answers,
so every turn's prompt is known before sending and the prefix oracle replays it then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: A ShareGPT ``from`` value → the chat role it is sent as.
ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "assistant": "assistant",
    "bard": "assistant",
    "bing": "assistant",
}


@dataclass(frozen=True)
class Conversation:
    """One conversation: its system message and its turns (user message, recorded answer)."""

    system: str | None
    turns: tuple[tuple[str, str | None], ...]

    def messages(self, turn: int) -> tuple[dict[str, str], ...]:
        """The chat messages turn ``turn`` sends: system, history, then its user message."""
        out: list[dict[str, str]] = []
        if self.system is not None:
            out.append({"role": "system", "content": self.system})
        for user, answer in self.turns[:turn]:
            out.append({"role": "user", "content": user})
            out.append({"role": "assistant", "content": answer or ""})
        out.append({"role": "user", "content": self.turns[turn][0]})
        return tuple(out)


def _message(item: Any) -> tuple[str | None, Any]:
    if not isinstance(item, dict):
        return None, None
    return ROLES.get(str(item.get("from", "")).lower()), item.get("value")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def conversation(item: Any) -> Conversation | None:
    """``item`` (one element of a ShareGPT list) as a conversation; ``None`` without a turn."""
    raw = item.get("conversations") if isinstance(item, dict) else None
    if not isinstance(raw, list):
        return None
    messages = [_message(m) for m in raw]
    at, system = 0, None
    if messages and messages[0][0] == "system":
        system, at = _text(messages[0][1]), 1
    turns: list[tuple[str, str | None]] = []
    while at + 1 < len(messages):
        (role, value), (answer_role, answer) = messages[at], messages[at + 1]
        user = _text(value)
        if role != "user" or answer_role != "assistant" or user is None:
            break
        turns.append((user, answer if isinstance(answer, str) else None))
        if not isinstance(answer, str):
            break
        at += 2
    return Conversation(system, tuple(turns)) if turns else None


def conversations(items: list[Any]) -> list[Conversation]:
    """Every conversation of a ShareGPT list, in file order (items without a turn skipped)."""
    return [c for c in (conversation(item) for item in items) if c is not None]
