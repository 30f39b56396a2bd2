"""A module written to a temporary file and imported, as a contributor's new module would
be (a toy hypothesis, a toy metric: each registers itself on import)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType


@contextmanager
def imported(folder: Path, name: str, source: str) -> Iterator[ModuleType]:
    """``source`` written to ``folder/name.py`` and imported as ``name``; forgotten by
    ``sys.modules`` after (the caller unregisters what it registered)."""
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
