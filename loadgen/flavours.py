"""Every server kind prefillscope knows, one :class:`Flavour` each: the one owner of flavour facts.

A flavour is which server is behind an endpoint (vLLM, SGLang, llama.cpp, the embedded
engine, or an OpenAI-compatible server of unknown make). Everything that differs between
them is written here once and read by the load generator (capabilities, API, paths), the
probes (detection evidence, the metric mapping), the diagnosis (the flags its advice names)
and ``diagnose ab --launch`` (the launch template). The metric names themselves live in the
flavour's mapping file (``probes/mappings/<mapping>.toml``: the names, and the prefixes that
recognise a scrape); the request shapes in its adapter (``loadgen/adapters/``).

The entries are the tables of ``loadgen/flavours.toml``, read once into :data:`REGISTRY`.
Adding a flavour is one table there, one mapping file and, if it speaks an API of its own,
one adapter. Nothing else names a flavour: ``tests/loadgen/test_flavour_literals.py`` fails
on a flavour-name literal used as a flavour key anywhere else.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workloads.errors import InputError

#: The words of a ``diagnose ab --launch`` template the A/B fills in per arm (``launch``
#: below; ``session.launcher`` fills them, ``diagnose.next_steps`` keeps them unquoted).
LAUNCH_PLACEHOLDERS = ("{chunk}", "{port}")


@dataclass(frozen=True)
class Capabilities:
    """Request extras and endpoints a flavour is known to accept.

    ``reset_path`` is the POST that empties its prefix cache; ``erase_slots`` says the cache
    is emptied slot by slot instead (llama.cpp: ``GET /slots``, then ``POST
    /slots/{id}?action=erase``); ``native_api`` is the API of its own beside OpenAI's and
    ``native_path`` the path its requests go to (its adapter in ``loadgen/adapters/``).
    """

    cache_salt: bool = False
    continuous_usage: bool = False
    return_token_ids: bool = False
    ignore_eos: bool = False
    reset_path: str | None = None
    native_api: str | None = None
    native_path: str | None = None
    erase_slots: bool = False


@dataclass(frozen=True)
class Evidence:
    """An endpoint only this server has: ``GET path`` answers a JSON object holding ``key``."""

    path: str
    key: str


@dataclass(frozen=True)
class Flavour:
    """One server kind.

    ``owned_by`` are the ``/v1/models`` ``owned_by`` values that name it; ``evidence`` the
    endpoint that proves it when the metrics and ``owned_by`` say nothing, and that says its
    version and model facts (``info_path``). ``mapping`` is the stem of its built-in metric
    mapping (``probes/mappings/<mapping>.toml``; ``None``: no metrics known). ``tokenize`` /
    ``detokenize`` are its tokenizer endpoints and ``tokenize_dialect`` the request shape
    they take (``workloads.tokenizer.SERVED_TOKENIZERS``); ``vocab_by_bisection`` says
    ``/detokenize`` refuses an unknown id, so the vocabulary size can be found by bisection,
    asking with ``detokenize_options`` added to the request, and ``confirm_vocab`` that the
    bound found may be confirmed by sending it in a prompt (a server that dies on such a
    prompt says false). ``server_args_path`` is an endpoint that dumps the server's
    arguments (SGLang's ``/get_server_info``), and ``launcher`` the program its
    ``launch_command`` follows. ``chunk_flags`` are its launch flags that set the prompt
    tokens one step may carry (the chunk budget), ``prefix_cache_flags`` those that turn its
    prefix cache on (or, written ``no …``, the one whose absence does),
    ``concurrency_flags`` those that cap the requests it runs at once, ``usage_flag`` the
    one without which its usage says no cached tokens, ``metrics_flag`` the one without
    which it serves no ``/metrics``; ``launch`` the ``diagnose ab --launch`` template that
    sets the budget per arm. ``engine_keys`` says those settings are ``EngineConfig`` keys
    set with ``bench --engine KEY=VALUE`` (the embedded engine), not flags of a server's
    command line. ``cache_model`` is the prefix-cache model its server uses
    (``workloads/prefix.py``): ``blocks`` (hash-chained blocks), ``radix`` (a token radix
    tree) or ``slots``.
    """

    name: str
    label: str
    default_api: str
    cache_model: str
    capabilities: Capabilities = Capabilities()
    mapping: str | None = None
    owned_by: tuple[str, ...] = ()
    evidence: Evidence | None = None
    tokenize: str | None = "/tokenize"
    detokenize: str | None = "/detokenize"
    tokenize_dialect: str | None = None
    chat_template_path: str | None = None
    vocab_by_bisection: bool = True
    detokenize_options: tuple[tuple[str, Any], ...] = ()
    confirm_vocab: bool = True
    server_args_path: str | None = None
    launcher: str | None = None
    engine_keys: bool = False
    chunk_flags: tuple[str, ...] = ()
    prefix_cache_flags: tuple[str, ...] = ()
    concurrency_flags: tuple[str, ...] = ()
    usage_flag: str | None = None
    metrics_flag: str | None = None
    launch: str | None = None
    reset_hint: str | None = None

    @property
    def info_path(self) -> str | None:
        """The endpoint that says its version and model facts: its evidence endpoint."""
        return self.evidence.path if self.evidence is not None else None

    def chunk_setting(self, value: int | str) -> str:
        """The flags that set the chunk budget to ``value``: ``--batch-size 512
        --ubatch-size 512``."""
        if not self.chunk_flags:
            return f"a budget of {value} tokens per step"
        if self.engine_keys:
            return " ".join(f"--engine {key}={value}" for key in self.chunk_flags)
        return " ".join(f"{flag} {value}" for flag in self.chunk_flags)

    def launch_template(self, model: str) -> str | None:
        """The ``--launch`` template for this server with ``model`` filled in, or None."""
        return None if self.launch is None else self.launch.replace("{model}", model)


REGISTRY_FILE = Path(__file__).with_name("flavours.toml")


def _entries(path: Path = REGISTRY_FILE) -> tuple[Flavour, ...]:
    """The registry's tables as :class:`Flavour` entries, in its detection ``order``. A
    table may start ``like = "NAME"`` from another entry; ``""`` clears a string it took."""
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    tables: dict[str, dict[str, Any]] = doc["flavour"]
    built: dict[str, Flavour] = {}

    def entry(name: str) -> Flavour:
        if name not in built:
            table = dict(tables[name])
            base = entry(table.pop("like")) if "like" in table else None
            fields: dict[str, Any] = {"name": name}
            for key, value in table.items():
                if key == "capabilities":
                    value = Capabilities(**value)
                elif key == "evidence":
                    value = Evidence(**value)
                elif key == "detokenize_options":
                    value = tuple(value.items())
                elif isinstance(value, list):
                    value = tuple(value)
                fields[key] = None if value == "" else value
            built[name] = replace(base, **fields) if base else Flavour(**fields)
        return built[name]

    if sorted(doc["order"]) != sorted(tables):
        raise ValueError(f"{path}: order must name every [flavour.*] table once")
    return tuple(entry(name) for name in doc["order"])


#: Built-in flavours in detection order (``flavours.toml``'s ``order``).
REGISTRY: tuple[Flavour, ...] = _entries()
BY_NAME: dict[str, Flavour] = {f.name: f for f in REGISTRY}
NAMES: tuple[str, ...] = tuple(BY_NAME)
#: The fallback when no evidence names a server.
GENERIC = REGISTRY[-1]
#: The embedded engine (``bench`` without ``--endpoint`` drives it in-process).
EMBEDDED = REGISTRY[0]
#: Its name for the chunk budget: ``bench --engine max_num_batched_tokens=N``.
EMBEDDED_CHUNK_KEY = EMBEDDED.chunk_flags[0]
#: Flavours with a built-in metric mapping, in detection order.
MAPPED: tuple[str, ...] = tuple(f.name for f in REGISTRY if f.mapping is not None)
#: APIs of their own, by name: only a server of that flavour speaks them.
NATIVE_APIS: dict[str, Flavour] = {
    f.capabilities.native_api: f for f in REGISTRY if f.capabilities.native_api
}


def flavour(name: str, field_name: str = "--backend") -> Flavour:
    """The flavour called ``name``; an unknown one is bad input naming ``field_name``."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise InputError(
            field_name, f"unknown backend {name!r}", "use one of " + ", ".join(NAMES)
        ) from None


def known(name: str | None) -> Flavour | None:
    """The flavour called ``name``, or None (a run recorded by another version, no target)."""
    return BY_NAME.get(name or "")


def by_owner(owner: str | None) -> Flavour | None:
    """The flavour whose ``/v1/models`` ``owned_by`` is ``owner``."""
    return next((f for f in REGISTRY if owner in f.owned_by), None)


def default_cache_model(flavour_name: str | None) -> str:
    """The prefix-cache model of the server called ``flavour_name`` (``blocks`` when
    unknown): what ``bench`` picks for its oracle from the detected flavour."""
    found = known(flavour_name)
    return found.cache_model if found is not None else GENERIC.cache_model
