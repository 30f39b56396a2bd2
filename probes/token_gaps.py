"""Per-token inter-token latency (ITL): the gaps between a request's tokens.

* **ITL is per token.** A chunk carrying n tokens after a gap g gives n gaps of g/n. The
  first chunk's n-1 extra tokens arrived together with the first token: they give n-1 gaps
  of 0 (their wait is inside TTFT). With that rule a request's gaps number
  ``output_tokens - 1`` and sum to ``last chunk - first chunk``, so their mean is the
  request's TPOT (exactly, when the stream ends with its last token chunk). Chunks with no
  tokens (a role-only delta, a usage-only tail) are not tokens and are skipped.

Every ITL figure (the summary, the report, compare, the A/B, calibration) takes its gaps
from ``token_gaps``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from runfmt.columns import Columns, Table, factorize, numbers

#: The columns of a chunk the gaps read.
CHUNK_COLUMNS = ("request_id", "t_s", "n_tokens")
#: What ``TokenGaps.per_request`` reduces one request's gaps with.
_REDUCERS = {"max": np.maximum, "min": np.minimum, "sum": np.add}


@dataclass(frozen=True)
class TokenGaps:
    """Per-token inter-token gaps of a set of requests, in request then time order.

    ``request`` holds, for each gap, the index of its request in ``request_ids``: ITL
    gaps of one request are not independent, and the statistics resample by request.
    ``t_s`` is the arrival time of the chunk that carried the token, so a gap spans
    ``[t_s - n * gap_s, t_s]`` for a chunk of n tokens.
    """

    gap_s: np.ndarray
    request: np.ndarray
    t_s: np.ndarray
    request_ids: np.ndarray

    def per_request(self, how: str = "max") -> dict[Any, float]:
        """One value per request with gaps (``max``, ``min``, ``sum``, ``mean``), by
        request id. A request's gaps lie together (``request`` never decreases)."""
        if how not in (*_REDUCERS, "mean"):
            raise ValueError(f"per_request: {how!r} is not one of max, min, sum, mean")
        if not self.gap_s.size:
            return {}
        starts = np.flatnonzero(np.r_[True, self.request[1:] != self.request[:-1]])
        if how == "mean":
            sizes = np.diff(np.r_[starts, self.gap_s.size])
            values = np.add.reduceat(self.gap_s, starts) / sizes
        else:
            values = _REDUCERS[how].reduceat(self.gap_s, starts)
        ids = self.request_ids[self.request[starts]]
        return dict(zip(ids.tolist(), values.tolist(), strict=True))


def token_chunks(chunks: Table, request_ids: Any = None) -> Columns:
    """The chunks that carried tokens, optionally only those of ``request_ids``: their
    ``request_id``, ``t_s`` and ``n_tokens``, in the order they were recorded."""
    if chunks.empty:
        empty = np.empty(0)
        return Columns({"request_id": np.empty(0, dtype=object), "t_s": empty, "n_tokens": empty})
    keep = numbers(chunks, "n_tokens") > 0
    ids = np.asarray(chunks["request_id"], dtype=object)
    if request_ids is not None:
        wanted = set(np.asarray(request_ids, dtype=object).tolist())
        keep &= np.fromiter((i in wanted for i in ids.tolist()), dtype=bool, count=len(ids))
    return Columns({name: np.asarray(chunks[name])[keep] for name in CHUNK_COLUMNS})


def token_chunk_parts(
    parts: Iterable[Table], keep: Callable[[np.ndarray], np.ndarray] | None = None
) -> Iterator[tuple[Columns, int]]:
    """``token_chunks`` of each part of a chunks table in turn (``keep``, given a part's
    request ids, selects the requests), with the number of rows carried over: a request
    whose chunks go on from the previous part gets that part's last chunk in front, with
    one token (it opens no gap), so that its first gap here is measured from it. A run
    writes each request's chunks together, in time order (one journal line), so this is
    all a request split across two parts needs: the gaps of the parts together are
    ``token_gaps`` of the whole table."""
    last: tuple[Any, float] | None = None
    for part in parts:
        tokens = token_chunks(part)
        if keep is not None and len(tokens):
            tokens = tokens[keep(tokens["request_id"])]
        if not len(tokens):
            continue
        ids = np.asarray(tokens["request_id"], dtype=object)
        carried = int(last is not None and ids[0] == last[0])
        if carried:
            tokens = Columns(
                {
                    "request_id": np.r_[np.array([last[0]], dtype=object), ids],
                    "t_s": np.r_[last[1], tokens["t_s"].astype(float)],
                    "n_tokens": np.r_[1, tokens["n_tokens"].astype(np.int64)],
                }
            )
        last = (ids[-1], float(tokens["t_s"][-1]))
        yield tokens, carried


def token_gaps(chunks: Table, request_ids: Any = None) -> TokenGaps:
    """Per-token ITL gaps (the rule is the module docstring's), vectorised.

    ``request_ids`` restricts the gaps to those requests (the measured, completed ones).
    """
    return chunk_gaps(token_chunks(chunks, request_ids))


def chunk_gaps(df: Columns) -> TokenGaps:
    """The gaps of token-bearing chunks (``token_chunks``)."""
    codes, uniques = factorize(df["request_id"])
    return gaps_of(codes, df["t_s"].astype(float), df["n_tokens"].astype(np.int64), uniques)


def gaps_of(codes: np.ndarray, t: np.ndarray, n: np.ndarray, request_ids: Any) -> TokenGaps:
    """The gaps of token-bearing chunks given as arrays: each chunk's request (an index
    into ``request_ids``), arrival time and token count. ``token_gaps`` reads them from a
    chunks table; the simulator, whose streams it holds as arrays already, calls this."""
    uniques = np.asarray(request_ids)
    in_order = np.all((codes[1:] > codes[:-1]) | ((codes[1:] == codes[:-1]) & (t[1:] >= t[:-1])))
    if not in_order:  # runs write each request's chunks together and in time order
        order = np.lexsort((t, codes))
        codes, t, n = codes[order], t[order], n[order]
    first = np.ones(len(codes), dtype=bool)
    first[1:] = codes[1:] != codes[:-1]
    previous = np.empty_like(t)
    previous[1:] = t[:-1]
    per_token = np.where(first, 0.0, (t - previous) / n)
    repeats = np.where(first, n - 1, n)
    if repeats.max(initial=0) <= 1:  # one token per chunk, the usual stream: a mask will do
        keep = repeats == 1
        per_token, codes, t = per_token[keep], codes[keep], t[keep]
    else:
        per_token, codes, t = (np.repeat(a, repeats) for a in (per_token, codes, t))
    return TokenGaps(gap_s=per_token, request=codes, t_s=t, request_ids=uniques)


def chunk_counts(chunks: Table, request_ids: Any = None) -> dict[str, Any]:
    """How tokens arrived: token-bearing chunks, multi-token chunks and their share."""
    n = token_chunks(chunks, request_ids)["n_tokens"].astype(np.int64)
    multi = int((n > 1).sum())
    return {
        "count": int(n.size),
        "tokens": int(n.sum()),
        "multi_token": multi,
        "multi_token_share": multi / n.size if n.size else None,
    }
