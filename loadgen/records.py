"""What the load generator observed: one record per request, one event per stream chunk.

These are the rows of ``requests.parquet`` and ``chunks.parquet`` (the run format:
``docs/ARCHITECTURE.md``).
Times are seconds from the run's t=0 on the monotonic clock. Unknown values are
``None`` (null in parquet), never 0: a server that does not report ``cached_tokens``
is not a server that reported zero.

The server's ``usage`` is kept as it said it, but checked (``usage_suspect``): a count
below zero, more cached tokens than prompt tokens, the whole prompt reported cached (no
server can: the last prompt token is computed to give the first output token's logits —
vLLM caps a prefix hit at the request's tokens − 1, SGLang its matched prefix at the
input − 1, llama.cpp re-evaluates at least one token; so does ``workloads.prefix``), or a
completion count that parts from
the tokens the stream carried by more than its counting method allows
(``STREAM_SLACK``) flag the row with the reason, and the summary leaves such rows out of
the prefix hit rates (``probes.latency``).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field, fields
from enum import StrEnum

from runfmt.tables import COMPLETED_STATUS


class ErrorKind(StrEnum):
    """Every way a request can fail, as counted in ``summary.json``'s ``errors``."""

    CONNECT = "connect"
    DROPPED = "dropped"
    TIMEOUT = "timeout"
    HTTP_429 = "http_429"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    STREAM_ERROR_EVENT = "stream_error_event"
    STREAM_MALFORMED = "stream_malformed"
    STREAM_TRUNCATED = "stream_truncated"
    STREAM_OVERSIZE = "stream_oversize"
    CANCELLED = "cancelled"

    @classmethod
    def for_status(cls, status: int) -> ErrorKind:
        if status == 429:
            return cls.HTTP_429
        return cls.HTTP_5XX if status >= 500 else cls.HTTP_4XX


class Status(StrEnum):
    OK = COMPLETED_STATUS  # the run format's: ``runfmt.tables`` counts a request by it
    ERROR = "error"


@dataclass
class ChunkEvent:
    """One received stream chunk: when it arrived and how many tokens it carried."""

    request_id: str
    t_s: float
    n_tokens: int


@dataclass
class ChunkTimes:
    """Arrival time and token count of each token-bearing read of one stream, as typed
    arrays the stream's sink appends to (no Python object per read); a live observer is handed
    them when the stream starts (``LoadObserver.on_stream``) and reads them when it likes."""

    t_s: array = field(default_factory=lambda: array("d"))
    n_tokens: array = field(default_factory=lambda: array("q"))


@dataclass
class RequestRecord:
    """Everything measured about one request; a row of ``requests.parquet``."""

    id: str
    kind: str = "request"
    group: int | None = None
    tenant: str | None = None
    lora: str | None = None
    session: int | None = None
    turn: int | None = None
    warmup: bool = False
    intended_s: float | None = None
    #: When the client let it go: its intended time, or later when it waited for a
    #: ``--max-concurrency`` slot (part of the dispatch lag, the cap's queue).
    released_s: float | None = None
    sent_s: float | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    expected_cached_tokens: int | None = None
    max_tokens: int | None = None
    num_chunks: int = 0
    multi_token_chunks: int = 0
    token_count_method: str | None = None
    finish_reason: str | None = None
    status: str = Status.OK
    error_kind: str | None = None
    http_status: int | None = None
    error_message: str | None = None
    #: Sent a second time, on a fresh connection: the first try's pooled connection was
    #: closed by the server before any byte of the request reached it.
    retried: bool = False
    #: Why the server's ``usage`` cannot be right (``usage_suspect``), or ``None``.
    usage_suspect: str | None = None
    output_token_ids: list[int] | None = field(default=None, repr=False)
    output_logprobs: list[float] | None = field(default=None, repr=False)
    #: The streamed answer's text, when the run keeps it (``LoadOptions.keep_text``).
    output_text: str | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def to_row(self) -> dict:
        """The record as a row, every field by name (a shallow copy: rows are written at once,
        and ``dataclasses.asdict``'s deep copy costs more than the rest of a request)."""
        return {name: getattr(self, name) for name in _RECORD_COLUMNS}

    @classmethod
    def columns(cls) -> list[str]:
        return list(_RECORD_COLUMNS)


_RECORD_COLUMNS = tuple(f.name for f in fields(RequestRecord))

#: How far the server's ``completion_tokens`` may part from the tokens the stream carried,
#: by how they were counted (``RequestRecord.token_count_method``), as ``(below, above)``:
#: how many fewer and how many more the server may report. ``usage`` (vLLM's and SGLang's
#: cumulative counters, llama.cpp's ``tokens_predicted``) and ``token_ids`` count the same
#: tokens the final usage does, but for one the final usage chunk may add (a stop token
#: not streamed); ``chunks`` (one per event with text) undercounts a server that puts
#: several tokens in one event (vLLM's chat stream without continuous usage: 3 events, 8
#: tokens), so only more events than tokens is impossible; a ``tokenizer`` recount of text
#: pieces is not exact either way and is not compared.
STREAM_SLACK: dict[str | None, tuple[float, float]] = {
    "usage": (1, 1),
    "token_ids": (1, 1),
    "chunks": (1, float("inf")),
}


def usage_suspect(
    prompt: int | None,
    completion: int | None,
    cached: int | None,
    streamed: int,
    method: str | None,
) -> str | None:
    """Why a finished request's reported usage cannot be right (``; ``-joined), or ``None``."""
    why = [
        f"negative {name} ({value})"
        for name, value in (
            ("prompt_tokens", prompt),
            ("completion_tokens", completion),
            ("cached_tokens", cached),
        )
        if value is not None and value < 0
    ]
    if cached is not None and prompt is not None and cached > prompt >= 0:
        why.append(f"cached_tokens > prompt_tokens ({cached} > {prompt})")
    elif cached is not None and prompt is not None and cached == prompt > 0:
        why.append(f"cached_tokens = prompt_tokens ({cached}: the last one is always computed)")
    slack = STREAM_SLACK.get(method)
    if slack is not None and completion is not None and completion >= 0:
        below, above = slack
        if not streamed - below <= completion <= streamed + above:
            why.append(
                f"completion_tokens != streamed tokens ({completion} vs {streamed} "
                f"counted by {method})"
            )
    return "; ".join(why) or None


def suspect_kind(reason: str) -> str:
    """A ``usage_suspect`` reason's kind, without its figures (what the summary counts)."""
    return reason.split(" (", 1)[0]
