"""The ``format_version`` every JSON document of a run carries, and the one check of it.

A document without the key was written before versions existed: version 1. A reader
takes every version up to its own and refuses a newer one with one line naming the file.
"""

from __future__ import annotations

from typing import Any

from workloads.errors import InputError

#: The version of a document written before ``format_version`` existed.
FIRST_FORMAT_VERSION = 1


def document_version(doc: dict[str, Any], source: str, newest: int) -> int:
    """``doc``'s format version; ``InputError`` naming ``source`` when it is newer than
    ``newest`` (the version this prefillscope writes) or not a whole number."""
    version = doc.get("format_version", FIRST_FORMAT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version > newest:
        raise InputError(
            source,
            f"has format_version {version!r}; this prefillscope reads up to {newest}",
            "read it with the prefillscope version that wrote it, or upgrade",
        )
    return version
