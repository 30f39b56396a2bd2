"""The installed prefillscope version: what ``run.json`` and ``ab.json`` record and the
embedded engine reports (``/version``, the system fingerprint)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """The installed prefillscope version; ``0+unknown`` when it is not installed."""
    try:
        return version("prefillscope")
    except PackageNotFoundError:
        return "0+unknown"
