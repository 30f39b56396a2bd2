"""The one rule for every file a command writes: whole or not at all.

Every writer (bench's documents and parquet files, ``diagnosis.json``, ``ab.json``,
``sweep.json``, ``isolation.json``, ``report --html``, ``simulate --html``, ``export
--out``) writes to a temporary name beside its target, flushes it to the disk, and
renames it into place. A write that fails (the disk full, the folder read-only) removes
the temporary file, leaves the target as it was (a complete earlier document stays
readable, a missing one stays missing: never a 0-byte or half-written file) and raises
``WriteFailed``, whose message is the one line the CLI prints before exiting 6: what
could not be written, why, and what was kept where.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path

#: The exit status of a command stopped by a write that failed (README: "Exit status").
EXIT_WRITE_FAILED = 6


class WriteFailed(OSError):
    """A write failed; ``reason`` says why (``no space left on DIR``), ``kept`` what was
    kept and where (the command's own words when it adds them), ``str()`` the one line."""

    def __init__(
        self,
        errno_: int | None,
        reason: str,
        kept: str | None = None,
        cause: OSError | None = None,
    ) -> None:
        super().__init__(errno_, reason)
        self.reason = reason
        self.kept = kept
        #: The operating system's error the write met.
        self.cause = cause

    def __str__(self) -> str:
        return self.reason if not self.kept else f"{self.reason}; {self.kept}"

    def keeping(self, kept: str) -> WriteFailed:
        """The same failure saying ``kept`` (what the command kept, and where)."""
        return type(self)(self.errno, self.reason, kept, self.cause)


def failure_reason(folder: Path | str, exc: OSError) -> str:
    """The one line for a failed write: ``no space left on DIR``, ``DIR is not writable``,
    ``FILE is a folder``."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on {folder}"
    why = exc.strerror or type(exc).__name__
    if exc.errno == errno.EISDIR:  # the target itself, not the folder it is in
        return f"{exc.filename2 or exc.filename or folder} is a folder"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"{folder} is not writable ({why})"
    return f"cannot write to {folder} ({why})"


def make_folder(folder: Path) -> Path:
    """``folder`` and its parents, made if missing (``WriteFailed`` when they cannot be)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise WriteFailed(exc.errno, f"cannot make folder {folder}: a file is in the way") from None
    except OSError as exc:
        reason = f"cannot make folder {folder}: {failure_reason(folder.parent, exc)}"
        raise WriteFailed(exc.errno, reason, "nothing written", exc) from None
    return folder


def temporary_name(target: Path) -> Path:
    """Where ``target`` is written before it is renamed into place."""
    return target.with_name(target.name + ".tmp")


def replace(target: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` a temporary file beside ``target``, flush it to the disk and rename
    it onto ``target``. On failure the temporary file is removed, ``target`` is as it was
    and ``WriteFailed`` says what was kept (the earlier ``target``, or nothing there)."""
    target = Path(target)
    tmp = temporary_name(target)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:  # a delayed allocation fails here, not at the rename
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp.replace(target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        before = "the earlier one kept" if target.is_file() else "nothing written there"
        reason = f"cannot write {target}: {failure_reason(target.parent, exc)}"
        raise WriteFailed(exc.errno, reason, f"{target.name}: {before}", exc) from None


def write_text(target: Path, text: str) -> None:
    """``text`` (UTF-8) into ``target``, whole or not at all (``replace``)."""
    data = text.encode("utf-8")
    replace(Path(target), lambda tmp: tmp.write_bytes(data))
