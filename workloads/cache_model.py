"""Which prefix cache a server keeps: the name a user writes and the pool it builds.

Three servers, three caches, one spelling (``serve --cache-model``, ``bench --cache-model``,
``--engine cache_model=``):

* ``blocks`` — vLLM: hash-chained full blocks in one shared pool, LRU over unpinned
  blocks (``workloads.prefix``);
* ``radix`` or ``radix:P`` — SGLang: a radix tree of token runs, matched token by token
  (``P`` is SGLang's ``--page-size``: a match is rounded down to whole pages), evicted
  leaf by leaf, least recently used first (``workloads.radix``);
* ``slots:N`` — llama.cpp: ``N`` slots that each keep one sequence; a request reuses the
  longest common prefix with the slot it lands on (``workloads.slots``). Options after
  commas: ``similarity=F`` (``--slot-prompt-similarity``, default 0.1),
  ``cache_reuse=K`` (``--cache-reuse``, default 0: off), ``cache_ram=off`` (``--cache-ram
  0``: no host prompt cache; default on, unbounded).

Engine and oracle build their pool with ``make_pool``, so both run the same code.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime import engine_metrics
from workloads.errors import InputError
from workloads.limits import MAX_CONCURRENCY, MAX_TOKENS, Bound

KINDS = ("blocks", "radix", "slots")
#: The embedded engine's series naming its cache model in a ``cache_model`` label.
CACHE_MODEL_INFO = engine_metrics.CACHE_MODEL_INFO
#: llama.cpp's default ``--slot-prompt-similarity`` (common/common.h).
DEFAULT_SIMILARITY = 0.1
_FIX = "use blocks, radix, radix:PAGE or slots:N (e.g. slots:4)"


@dataclass(frozen=True)
class CacheModel:
    """A parsed cache model; ``str()`` gives back its canonical spelling."""

    kind: str = "blocks"
    slots: int = 0
    page_size: int = 1
    similarity: float = DEFAULT_SIMILARITY
    cache_reuse: int = 0
    cache_ram: bool = True

    def __str__(self) -> str:
        if self.kind == "radix":
            return "radix" if self.page_size == 1 else f"radix:{self.page_size}"
        if self.kind == "slots":
            text = f"slots:{self.slots}"
            if self.similarity != DEFAULT_SIMILARITY:
                text += f",similarity={self.similarity:g}"
            if self.cache_reuse:
                text += f",cache_reuse={self.cache_reuse}"
            if not self.cache_ram:
                text += ",cache_ram=off"
            return text
        return "blocks"


def parse_cache_model(text: str, flag: str = "--cache-model") -> CacheModel:
    """``text`` as a ``CacheModel``; an ``InputError`` naming ``flag`` when it is not one."""
    raw = str(text).strip().lower()
    head, _, options = raw.partition(",")
    kind, colon, arg = head.partition(":")
    if kind not in KINDS:
        raise InputError(flag, f"unknown cache model {text!r}", _FIX)
    if kind == "blocks":
        if colon or options:
            raise InputError(flag, f"blocks takes no argument, got {text!r}", _FIX)
        return CacheModel()
    if kind == "radix":
        if options:
            raise InputError(flag, f"radix takes only a page size, got {text!r}", _FIX)
        page = _whole(arg, flag, "the page size", MAX_TOKENS) if colon else 1
        return CacheModel("radix", page_size=page)
    if not colon:
        raise InputError(flag, "slots needs its count", "e.g. slots:4 (llama-server -np 4)")
    slots = _whole(arg, flag, "the slot count", MAX_CONCURRENCY)
    values: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in options.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq:
            raise InputError(flag, f"expected KEY=VALUE after slots:N, got {item!r}")
        if key == "similarity":
            values[key] = _number(value, flag, "similarity", Bound(0, 1))
        elif key == "cache_reuse":
            values[key] = int(_number(value, flag, "cache_reuse", Bound(0, MAX_TOKENS, whole=True)))
        elif key == "cache_ram":
            if value.strip() not in ("on", "off"):
                raise InputError(flag, f"cache_ram={value!r}", "use cache_ram=on or cache_ram=off")
            values[key] = value.strip() == "on"
        else:
            raise InputError(
                flag, f"unknown slots option {key!r}", "known: similarity, cache_reuse, cache_ram"
            )
    return CacheModel("slots", slots=slots, **values)  # type: ignore[arg-type]


def _number(text: str, flag: str, what: str, bound: Bound) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(flag, f"{what}={text!r} is not a number") from None
    try:
        bound.check(what, value)
    except InputError as exc:
        raise InputError(flag, f"{what}: {exc.problem}", exc.fix) from None
    return value


def _whole(text: str, flag: str, what: str, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InputError(flag, f"{what} {text!r} is not a whole number", _FIX) from None
    if not 1 <= value <= high:
        raise InputError(flag, f"{what} {value} is out of range", f"use 1..{high}")
    return value
