"""How a diagnosis words its numbers and a server's own flags in sentences."""

from __future__ import annotations

from loadgen.flavours import EMBEDDED, REGISTRY, Flavour


def percent(share: float) -> str:
    """A share as a reader wants it in a sentence: ``37 %``, ``0.34 %``, ``0 %``."""
    value = 100 * share
    return f"{value:.0f} %" if value >= 1 or value == 0 else f"{value:.2g} %"


# -- a server's own flags ----------------------------------------------------------------
# Advice names the knob as the server it was given for spells it (``Flavour`` in
# ``loadgen.flavours``); for a server of unknown make, as every known server spells it.


def _flags(kind: Flavour, attr: str) -> str:
    """``--batch-size/--ubatch-size``; a flag whose absence is the switch (``no X``) as
    ``without X``."""
    return "/".join(f"without {f[3:]}" if f.startswith("no ") else f for f in getattr(kind, attr))


def _named(kind: Flavour, attr: str) -> str:
    """The server's own flags (``llama.cpp's --batch-size/--ubatch-size``; the embedded
    engine's ``EngineConfig`` key bare), or for a server of unknown make every known
    server's (``vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size, …``)."""
    own = _flags(kind, attr)
    if own and kind.engine_keys:
        return own
    if own:
        return f"{kind.label}'s {own}"
    known = [
        f"{f.label} {_flags(f, attr)}" for f in REGISTRY if f is not EMBEDDED and _flags(f, attr)
    ]
    return ", ".join(known)


def _knob(kind: Flavour, attr: str, what: str) -> str:
    named = _named(kind, attr)
    return named if _flags(kind, attr) else f"{what} ({named})"


def chunk_flags_named(kind: Flavour) -> str:
    """The chunk-budget flags, named as in :func:`_named`."""
    return _named(kind, "chunk_flags")


def chunk_knob(kind: Flavour) -> str:
    """The chunk budget as the server names it: ``llama.cpp's --batch-size/--ubatch-size``,
    ``SGLang's --chunked-prefill-size``; for an unknown server, the known ones."""
    return _knob(kind, "chunk_flags", "the server's token budget per step")


def concurrency_knob(kind: Flavour) -> str:
    """The cap on requests run at once as the server names it: ``vLLM's --max-num-seqs``,
    ``llama.cpp's --parallel`` (its slots)."""
    return _knob(kind, "concurrency_flags", "the server's limit on requests at once")


def prefix_cache_knob(kind: Flavour) -> str:
    """How the server's prefix cache is turned on: ``vLLM's --enable-prefix-caching``,
    ``SGLang started without --disable-radix-cache``."""
    if kind.prefix_cache_flags[:1] and kind.prefix_cache_flags[0].startswith("no "):
        return f"{kind.label} started {_flags(kind, 'prefix_cache_flags')}"
    return _knob(kind, "prefix_cache_flags", "the server's prefix-cache switch")


def reporting_flags(kind: Flavour) -> str:
    """What a server needs to report its cached tokens and serve ``/metrics``:
    ``vLLM: start the server with --enable-prompt-tokens-details``, ``llama.cpp: start
    the server with --metrics``; for an unknown server, the known ones."""
    kinds = [kind] if kind.mapping else [f for f in REGISTRY if f is not EMBEDDED and f.mapping]
    said = []
    for each in kinds:
        flags = [f for f in (each.usage_flag, each.metrics_flag) if f]
        if flags:
            said.append(f"{each.label}: start the server with {' '.join(flags)}")
    return "; ".join(said) or f"{kind.label}: rerun with its metrics scraped"
