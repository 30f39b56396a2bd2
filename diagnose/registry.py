"""The hypotheses a diagnosis judges, each declared once, beside its ``assess``.

A hypothesis module decorates its ``assess(ctx) -> Finding`` with ``@hypothesis(...)``:
its id and title, what kind of cause it is (``role``), which other findings it can
explain and how (``explains``), whether it reads latency on the client's clock
(``reads_latency``), whether it may lead as a weakened primary (``may_lead``), the
advice the decision box opens with when it is the primary (``measure_first``) and how a
hard failure is contained when it is (``contain``), and, optionally, the latency it
explains (``cost``: request-seconds, see ``diagnose.costs``) and the one root cause it
names when it explains several findings (``root_cause``). Nothing else names it:
``diagnose.checklist`` judges every registered hypothesis, ``diagnose.ranking`` links and
ranks them by their declarations, the decision box follows the primary's.

Discovery: every module of the ``diagnose`` package whose source has a line starting
with ``@hypothesis(`` is imported on first use (``declared``); a module outside the
package (a plugin, a test's toy) registers by being imported. Adding a hypothesis is one
module and its tests; ``docs/ARCHITECTURE.md`` shows the recipe.

Roles, in the order the ranking falls back to when the latency explained is not known
for every candidate: ``root`` (a cause that produces other findings' symptoms: overload,
pool exhaustion, the prefix cache, a KV transfer), ``step`` (what a decode step is made
of: prefill chunks, host work, KV reads) and ``client`` (the load generator, ranked
last: a server-side reading it cannot explain outranks it).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diagnose.context import Context
    from runfmt.diagnosis import Finding

ROLES = ("root", "step", "client")
#: How a hard failure is contained when the hypothesis is the primary (``checklist``).
CONTAINMENTS = ("chunk", "shed", "transfer", "concurrency")
MARKER = "@hypothesis("


@dataclass(frozen=True)
class Cost:
    """The latency a finding explains, summed over requests (request-seconds), and how
    it was reckoned (``diagnose.costs``)."""

    seconds: float
    how: str


@dataclass(frozen=True)
class Link:
    """How a cause produces an effect's symptom; ``when(findings)`` (if given) must hold."""

    words: str
    when: Callable[[Mapping[str, Finding]], bool] | None = None


@dataclass(frozen=True)
class Declaration:
    id: str
    title: str
    assess: Callable[[Context], Finding]
    role: str
    #: Place among the hypotheses as shown.
    order: int
    explains: Mapping[str, Link] = field(default_factory=dict)
    #: Explains every latency finding read on the client's clock (the client itself).
    explains_client_clock: str | None = None
    reads_latency: bool = False
    may_lead: bool = True
    measure_first: str = "Confirm it before changing the configuration"
    contain: str = "concurrency"
    cost: Callable[[Context, Finding], Cost | None] | None = None
    #: The one cause named when the finding explains others (``None``: none to name).
    root_cause: Callable[[Finding], str | None] | None = None
    #: The prefix cache's verdict is shown apart from the hypotheses (``prefix_cache``).
    prefix_cache: bool = False
    #: Place among root causes when the latency explained cannot be weighed (lower first).
    precedence: int = 0
    #: The decision box's advice when it is the primary (default: ``measure_first``,
    #: then the finding's own next step).
    advice: Callable[[Context, Finding], str] | None = None
    module: str = ""


REGISTRY: dict[str, Declaration] = {}


def hypothesis(
    *,
    id: str,
    title: str,
    role: str,
    order: int,
    explains: Mapping[str, str | Link] | None = None,
    **attributes: object,
) -> Callable[[Callable[[Context], Finding]], Callable[[Context], Finding]]:
    """Register the decorated ``assess`` as hypothesis ``id`` (module docstring)."""
    if role not in ROLES:
        raise ValueError(f"hypothesis {id}: role {role!r} is not one of {ROLES}")
    if attributes.get("contain", "concurrency") not in CONTAINMENTS:
        raise ValueError(f"hypothesis {id}: contain must be one of {CONTAINMENTS}")
    links = {
        effect: words if isinstance(words, Link) else Link(words)
        for effect, words in (explains or {}).items()
    }

    def register(assess: Callable[[Context], Finding]) -> Callable[[Context], Finding]:
        known = REGISTRY.get(id)
        if known is not None and known.module != assess.__module__:
            where = f"{known.module}, {assess.__module__}"
            raise ValueError(f"hypothesis {id} is declared twice: {where}")
        attributes.setdefault("precedence", order)
        REGISTRY[id] = Declaration(
            id, title, assess, role, order, links, module=assess.__module__, **attributes
        )
        return assess

    return register


def _declaring_modules() -> list[str]:
    """The ``diagnose`` modules whose source declares a hypothesis."""
    package = Path(__file__).parent
    names = []
    for info in pkgutil.iter_modules([str(package)]):
        source = package / f"{info.name}.py"
        if source.is_file() and any(
            line.startswith(MARKER) for line in source.read_text(encoding="utf-8").splitlines()
        ):
            names.append(f"{__package__}.{info.name}")
    return sorted(names)


_DISCOVERED = False


def declared() -> list[Declaration]:
    """Every registered hypothesis, the package's own discovered first, in ``order``."""
    global _DISCOVERED
    if not _DISCOVERED:
        for name in _declaring_modules():
            importlib.import_module(name)
        _DISCOVERED = True
    return sorted(REGISTRY.values(), key=lambda d: (d.order, d.id))


def declaration(hid: str) -> Declaration | None:
    """The declaration of ``hid`` (``None`` for an id nothing declared)."""
    declared()
    return REGISTRY.get(hid)


def unregister(hid: str) -> None:
    """Remove a registered hypothesis (a test's toy, once the test is over)."""
    REGISTRY.pop(hid, None)
