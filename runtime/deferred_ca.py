"""aiohttp imported without loading the system's CA bundle until a TLS connection needs it.

aiohttp (3.10 and later) builds its two default TLS contexts when ``aiohttp.connector``
is imported, and each loads the system's CA bundle: about 70 ms of CPU, an eighth of a
16-request ``bench``, that a plain-http endpoint (most servers a benchmark talks to)
never uses. After ``install()`` — each package that imports aiohttp calls it from its
``__init__``, which runs before any of its modules' ``import aiohttp`` — the import of
``aiohttp.connector`` runs with the bundle's loading deferred: a context that would load
it while that module executes is marked instead (its class becomes a subclass of
``ssl.SSLContext``, so every ``isinstance`` check still holds), and the first socket or
BIO it wraps — the start of any TLS handshake, asyncio's and uvloop's alike — loads the
default verify paths first (honouring ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``, as the
eager load would) and unmarks it. Only contexts created while that one module executes
are touched, and ``ssl`` is restored when it ends, whatever it did. ``ssl`` itself is
imported only then: readers of run files never pay for it.

No library does this (it works around aiohttp's import-time choice), hence this module.
"""

from __future__ import annotations

import sys
import threading
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

#: The module whose import builds the default contexts.
MODULE = "aiohttp.connector"
_lock = threading.Lock()
#: The marked contexts' class, once ``_certs_on_first_use`` built it.
_MARKED: type | None = None


def _certs_on_first_use() -> type:
    """The marked contexts' class (built once, when ``ssl`` is needed anyway)."""
    import ssl

    global _MARKED
    if _MARKED is not None:
        return _MARKED

    class CertsOnFirstUse(ssl.SSLContext):
        """A context whose default CA certificates load before its first handshake."""

        def _load_certs(self) -> None:
            with _lock:
                if type(self) is CertsOnFirstUse:
                    ssl.SSLContext.set_default_verify_paths(self)
                    self.__class__ = ssl.SSLContext

        def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
            self._load_certs()
            return ssl.SSLContext.wrap_socket(self, *args, **kwargs)

        def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
            self._load_certs()
            return ssl.SSLContext.wrap_bio(self, *args, **kwargs)

        def set_default_verify_paths(self) -> None:
            self._load_certs()

    _MARKED = CertsOnFirstUse
    return _MARKED


class _DeferringLoader:
    """Runs ``aiohttp.connector``'s own loader with CA loading deferred."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        import ssl

        marked = _certs_on_first_use()

        def mark(context: ssl.SSLContext) -> None:
            if type(context) is ssl.SSLContext:
                context.__class__ = marked

        with _lock:
            ssl.SSLContext.set_default_verify_paths = mark  # type: ignore[method-assign,assignment]
            try:
                self.loader.exec_module(module)
            finally:
                del ssl.SSLContext.set_default_verify_paths  # the C method shows through again


class _Finder:
    """Finds ``aiohttp.connector`` as the other finders do, with ``_DeferringLoader``."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> ModuleSpec | None:
        if name != MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _DeferringLoader(spec.loader)
                return spec
        return None


_FINDER = _Finder()


def install() -> None:
    """Defer the CA loading of aiohttp's default contexts, if aiohttp is not imported
    yet (idempotent; costs nothing until aiohttp is imported)."""
    if MODULE not in sys.modules and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def deferred(context: object) -> bool:
    """Whether ``context`` still waits for its CA certificates."""
    return _MARKED is not None and type(context) is _MARKED
