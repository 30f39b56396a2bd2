"""A run document made of named sections: ``summary.json`` and ``ab.json``.

A subclass declares its sections as dataclass fields (each a JSON value), its file name
and the ``format_version`` it writes. Reading keeps what it does not know: a section a
newer writer added goes to ``extra``, and the sections are written back in the order they
were read (or given) in, so a document round-trips unchanged but for its version.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self

from runfmt.rundir import RunDir
from runfmt.version import FIRST_FORMAT_VERSION, document_version

#: The dataclass fields of a document that are not its sections.
_NOT_SECTIONS = {"extra", "order", "format_version"}


@dataclass
class SectionedDocument:
    """A JSON object of named sections with a ``format_version`` (see the module doc)."""

    FILE: ClassVar[str]
    FORMAT_VERSION: ClassVar[int]

    #: Sections this version does not declare, in the order they came.
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)
    #: The sections given, in their order (written back so, and an absent one stays
    #: absent unless set); every section in declared order when none were.
    order: tuple[str, ...] = field(default=(), compare=False, repr=False, kw_only=True)
    #: The version read (None: written by this version).
    format_version: int | None = field(default=None, compare=False, kw_only=True)

    @classmethod
    def from_sections(cls, sections: dict[str, Any]) -> Self:
        """The document of sections as they were computed (a plain dict)."""
        known = {f.name for f in fields(cls)} - _NOT_SECTIONS
        return cls(
            **{k: v for k, v in sections.items() if k in known},
            extra={k: v for k, v in sections.items() if k not in known},
            order=tuple(sections),
        )

    def to_json(self) -> dict[str, Any]:
        """The document: this version's ``format_version``, then every section."""
        sections = {f.name: getattr(self, f.name) for f in fields(self)}
        sections = {k: v for k, v in sections.items() if k not in _NOT_SECTIONS} | self.extra
        given = [k for k in self.order if k in sections]
        keys = [*given, *(k for k in sections if k not in given and (sections[k] or not given))]
        return {"format_version": self.FORMAT_VERSION} | {k: sections[k] for k in keys}

    def as_read(self) -> dict[str, Any]:
        """The document as its file held it: ``to_json`` with the version read (none for a
        version-1 file, which had no key; none for one computed, not read)."""
        doc = self.to_json()
        if self.format_version is None or self.format_version == FIRST_FORMAT_VERSION:
            del doc["format_version"]
        else:
            doc["format_version"] = self.format_version
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any], source: str | None = None) -> Self:
        """A document of any version this one reads (``InputError`` naming ``source``, the
        file, for a newer one)."""
        version = document_version(doc, source or cls.FILE, cls.FORMAT_VERSION)
        read = cls.from_sections({k: v for k, v in doc.items() if k != "format_version"})
        read.format_version = version
        return read

    @classmethod
    def read(cls, run: RunDir) -> Self:
        """The document in ``run`` (``InputError`` when missing, unreadable or newer)."""
        return cls.from_json(run.read_json(cls.FILE), str(run.path / cls.FILE))
