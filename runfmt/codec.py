"""One codec between a run document's frozen dataclasses and JSON, for every document.

A document section is a frozen dataclass; ``encode`` writes it as a JSON object and
``decode`` reads it back. The field's name is its JSON key (``key(...)`` names another);
its annotation says what the key holds: ``str``, ``int``, ``float``, ``bool``, a nested
section, ``tuple[X, ...]`` (a JSON array; ``list[X]`` for a section its writer fills in
place, such as a diagnosis's findings), ``Mapping[str, X]`` (a JSON object, read-only
once read), ``X | None``, or ``Any`` (a JSON value kept as written: a part of the document
that another package owns, such as the workload spec).

Reading is lenient, as a reader of any format version must be: a key an older or partial
document lacks reads as the field's default, and a value of the wrong JSON type (a
hand-edited file) reads as the default too. Neither loses anything: a section with a
field named ``extra`` keeps every key it does not declare, and every declared key whose
value it could not read, in ``extra``, and ``encode`` writes them back where they were.
So a document read and written again holds the same keys and values.

Absent and null: a declared key the document read did not have is marked ``ABSENT`` in
``extra`` and written back absent while its field keeps its default (an older
``run.json`` without ``oracle.cache_model`` stays without it). A field declared with
``key(omit_none=True)`` is left out of the JSON while it is ``None`` (a key that only
some runs carry, such as ``load.ray``), one with ``key(omit_empty=True)`` while it is
``None`` or empty (``run.json``'s ``labels``); any other field is written, ``null`` for
``None``. A field declared with ``key(nan_null=True)`` holds NaN for a figure that could
not be measured: JSON has no NaN, so it is written ``null`` and ``null`` reads back as NaN
(the isolation gap of too few probes). ``key(write=f)`` writes ``f(value)`` instead of the
value (a diagnosis's figures to six significant digits). A mapping field declared with
``key(inline=PATTERN)`` holds the object's own keys that match ``PATTERN`` (a regular
expression, whole key) and no other field names, written back in its place: keys another
package names (``summary.json``'s latencies, named by the metric registry). Numbers are
kept as written: an ``int`` in a ``float`` field stays an ``int`` (``8`` is not rewritten
``8.0``); a whole ``float`` in an ``int`` field reads as that ``int``.

The ``format_version`` rule is the documents' own (``runfmt.version``); the codec reads and
writes sections. The analysis of each class (its fields' keys, defaults and readers) is
made once, at its first use.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

T = TypeVar("T")

#: The field that keeps what a section does not declare (or could not read).
EXTRA = "extra"

_MISSING: Any = object()


class _Absent:
    """The mark ``extra`` holds for a declared key the document read did not have."""

    def __repr__(self) -> str:
        return "ABSENT"


#: A declared key that was absent from the document read (kept in ``extra``): written
#: back absent while the field keeps its default.
ABSENT: Any = _Absent()
_META_KEY = "runfmt.key"
_META_OMIT = "runfmt.omit_none"
_META_OMIT_EMPTY = "runfmt.omit_empty"
_META_NAN_NULL = "runfmt.nan_null"
_META_WRITE = "runfmt.write"
_META_INLINE = "runfmt.inline"


def key(
    name: str | None = None,
    *,
    omit_none: bool = False,
    omit_empty: bool = False,
    nan_null: bool = False,
    write: Callable[[Any], Any] | None = None,
    inline: str | None = None,
    **field_args: Any,
) -> Any:
    """A field whose JSON key is ``name`` (default: the field's name), left out of the JSON
    while ``None`` when ``omit_none``, while ``None`` or empty when ``omit_empty``, a NaN
    written ``null`` and ``null`` read as NaN when ``nan_null``, written as ``write(value)``
    when ``write`` is given, its entries the object's keys matching ``inline`` when given;
    ``field_args`` go to ``dataclasses.field``."""
    metadata = {
        _META_INLINE: re.compile(inline) if inline is not None else None,
        _META_KEY: name,
        _META_OMIT: omit_none,
        _META_OMIT_EMPTY: omit_empty,
        _META_NAN_NULL: nan_null,
        _META_WRITE: write,
    }
    return dataclasses.field(metadata=metadata, **field_args)


def absent(*keys: str) -> Mapping[str, Any]:
    """The ``extra`` of a section built without the declared ``keys``: written absent while
    their fields keep their defaults, as a document read without them is (a key one
    writer's section has only in some runs, sometimes ``null``)."""
    return MappingProxyType(dict.fromkeys(keys, ABSENT))


def declared_keys(cls: type) -> tuple[str, ...]:
    """The JSON keys ``cls`` declares, in its order (``extra`` and inline fields not
    among them)."""
    fields, _ = _plan(cls)
    return tuple(f.key for f in fields if f.inline is None)


def unrecorded(cls: type[T]) -> T:
    """A ``cls`` that recorded none of its keys, written as ``{}`` (a section the run never
    got to); ``cls`` keeps ``extra`` and has a default for every field."""
    return cls(extra=absent(*declared_keys(cls)))  # type: ignore[call-arg]


def frozen_map(value: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """A read-only JSON object (an empty one by default): a section's mapping field."""
    return MappingProxyType(dict(value or {}))


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


#: The default of a mapping field (``field(default_factory=EMPTY)``).
EMPTY: Callable[[], Mapping[str, Any]] = _empty


class _Unread(Exception):
    """A value of the wrong JSON type for its field."""


Reader = Callable[[Any], Any]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _read_int(value: Any) -> int:
    if _is_number(value) and float(value).is_integer():
        return int(value)
    raise _Unread


def _read_float(value: Any) -> float:
    if _is_number(value):
        return value  # kept as written: 8 stays 8
    raise _Unread


def _plain(kind: type) -> Reader:
    def read(value: Any) -> Any:
        if isinstance(value, kind) and not (kind is not bool and isinstance(value, bool)):
            return value
        raise _Unread

    return read


def _reader(hint: Any) -> Reader:
    """How a value of the annotation ``hint`` is read from JSON."""
    if hint is Any or hint is object:
        return lambda value: value
    if hint is int:
        return _read_int
    if hint is float:
        return _read_float
    if hint in (str, bool):
        return _plain(hint)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return lambda value, cls=hint: _decode_object(cls, value)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        rest = [a for a in args if a is not type(None)]
        inner = _reader(rest[0]) if len(rest) == 1 else (lambda value: value)
        return lambda value: None if value is None else inner(value)
    if origin in (tuple, list):
        item = _reader(args[0]) if args else (lambda value: value)
        kind = origin

        def read_array(value: Any) -> Any:
            if not isinstance(value, list | tuple):
                raise _Unread
            return kind(item(v) for v in value)

        return read_array
    if origin in (Mapping, dict, typing.Mapping) or hint in (dict, Mapping):
        item = _reader(args[1]) if len(args) == 2 else (lambda value: value)

        def read_mapping(value: Any) -> Mapping[str, Any]:
            if not isinstance(value, Mapping):
                raise _Unread
            return MappingProxyType({str(k): item(v) for k, v in value.items()})

        return read_mapping
    raise TypeError(f"runfmt.codec cannot read a field annotated {hint!r}")


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    omit_none: bool
    omit_empty: bool
    nan_null: bool
    write: Callable[[Any], Any] | None
    read: Reader
    default: Any  # _MISSING: none
    inline: re.Pattern[str] | None = None


_PLANS: dict[type, tuple[tuple[_Field, ...], bool]] = {}


def _plan(cls: type) -> tuple[tuple[_Field, ...], bool]:
    """The class's fields as the codec reads them, and whether it keeps ``extra``."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            if f.name == EXTRA or not f.init:
                continue
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory
            else:
                default = _MISSING
            name = f.metadata.get(_META_KEY) or f.name
            omit = bool(f.metadata.get(_META_OMIT))
            empty = bool(f.metadata.get(_META_OMIT_EMPTY))
            nan_null = bool(f.metadata.get(_META_NAN_NULL))
            read = _reader(hints[f.name])
            if nan_null:
                read = _nan_for_null(read)
            write = f.metadata.get(_META_WRITE)
            inline = f.metadata.get(_META_INLINE)
            out.append(_Field(f.name, name, omit, empty, nan_null, write, read, default, inline))
        keeps = any(f.name == EXTRA for f in dataclasses.fields(cls))
        plan = _PLANS[cls] = (tuple(out), keeps)
    return plan


def _nan_for_null(read: Reader) -> Reader:
    return lambda value: math.nan if value is None else read(value)


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _same(value: Any, default: Any) -> bool:
    return value == default or (_is_nan(value) and _is_nan(default))


def _default(field: _Field) -> Any:
    if field.default is _MISSING:
        return None
    return field.default() if callable(field.default) else field.default


def _decode_object(cls: type[T], raw: Any) -> T:
    if not isinstance(raw, Mapping):
        raise _Unread
    return decode(cls, raw)


def decode(cls: type[T], raw: Any) -> T:
    """``raw`` (a JSON object; anything else reads as an empty one) as a ``cls``: see the
    module doc for what is read, what defaults and what is kept in ``extra``."""
    fields, keeps = _plan(cls)
    values: dict[str, Any] = {}
    if not isinstance(raw, Mapping):
        raw = {}
    extra: dict[str, Any] = {}
    known = {f.key for f in fields if f.inline is None}
    for field in fields:
        if field.inline is not None:
            inline = {k: v for k, v in raw.items() if k not in known and field.inline.fullmatch(k)}
            known |= inline.keys()
            try:
                values[field.name] = field.read(inline)
            except _Unread:
                values[field.name] = _default(field)
                extra |= inline
            continue
        value = raw.get(field.key, _MISSING)
        if value is _MISSING:
            values[field.name] = _default(field)
            extra[field.key] = ABSENT
            continue
        try:
            values[field.name] = field.read(value)
        except _Unread:
            values[field.name] = _default(field)
            extra[field.key] = value
    if keeps:
        extra |= {k: v for k, v in raw.items() if k not in known}
        values[EXTRA] = MappingProxyType(extra)
    return cls(**values)


def encode(value: Any) -> Any:
    """``value`` as JSON: a section as an object in its declared key order (a ``None`` left
    out where declared so, what ``extra`` kept written back in its place), a tuple as an
    array, a mapping as an object; anything else as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields, keeps = _plan(type(value))
        out: dict[str, Any] = {}
        kept: Mapping[str, Any] = getattr(value, EXTRA) if keeps else {}
        for field in fields:
            item = getattr(value, field.name)
            if field.inline is not None:
                out |= encode(item)
                continue
            if field.nan_null and isinstance(item, float) and not math.isfinite(item):
                item = None  # JSON has no NaN
            if (item is None and (field.omit_none or field.omit_empty)) or (
                field.omit_empty and not item
            ):
                continue
            if kept.get(field.key) is ABSENT and _same(item, _default(field)):
                continue  # absent when read, not set since
            out[field.key] = encode(item) if field.write is None else field.write(item)
        for k, v in kept.items():
            if v is not ABSENT and (k not in out or out[k] in (None, {}, [])):
                out[k] = v  # read unchanged, not set since
        return out
    if isinstance(value, Mapping):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    return value
