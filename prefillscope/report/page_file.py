"""Writing a self-contained HTML page (``report --html``, ``sweep.html``) where asked."""

from __future__ import annotations

from pathlib import Path

from workloads.errors import InputError


def check_destination(path: Path, flag: str = "--html") -> Path:
    """``path`` as a file to write: its folder exists and it is not itself a folder (else a
    one-line input error for ``flag``, before anything runs or is written)."""
    if path.is_dir():
        raise InputError(flag, f"{path} is a folder", "give a file name in it")
    if not path.parent.is_dir():
        raise InputError(flag, f"folder {path.parent} does not exist", "create it first")
    return path


def write_html(path: Path, page: str, flag: str = "--html") -> None:
    """Write the page (redacted: a run from an older version may hold a URL's password)
    whole or not at all (``runtime.atomic``: a write that fails is exit 6, one line)."""
    from runtime import atomic, redact

    atomic.write_text(check_destination(path, flag), redact.text(page))
