"""Writing a self-contained HTML page (``report --html``, ``sweep.html``) where asked."""

from __future__ import annotations

from pathlib import Path

from workloads.errors import InputError


def write_html(path: Path, page: str) -> None:
    """Write the page (redacted: a run from an older version may hold a URL's password),
    turning an unwritable destination into a one-line input error."""
    from runtime import redact

    if not path.parent.is_dir():
        raise InputError("--html", f"folder {path.parent} does not exist", "create it first")
    try:
        path.write_text(redact.text(page), encoding="utf-8")
    except OSError as exc:
        raise InputError(
            "--html", f"cannot write {path}: {exc.strerror}", "pick a writable path"
        ) from exc
