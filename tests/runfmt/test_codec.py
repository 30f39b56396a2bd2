"""``runfmt.codec``: frozen sections to JSON and back — renamed keys, nested sections,
arrays, read-only objects, absent against null, unknown and unreadable keys kept."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from runfmt.codec import ABSENT, EMPTY, decode, encode, key


@dataclass(frozen=True)
class Inner:
    size: int | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Outer:
    name: str | None = None
    rate: float | None = None
    when: str | None = key("at", omit_none=True, default=None)
    tags: tuple[str, ...] = ()
    counts: Mapping[str, int] = field(default_factory=EMPTY)
    inner: Inner = field(default_factory=Inner)
    maybe: Inner | None = None
    notes: Mapping[str, str] = key(omit_empty=True, default_factory=EMPTY)
    raw: Any = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


def test_a_section_round_trips_with_its_types() -> None:
    doc = {
        "name": "a",
        "rate": 8,
        "at": "noon",
        "tags": ["x", "y"],
        "counts": {"k": 2},
        "inner": {"size": 16.0},
        "maybe": None,
        "notes": {"n": "1"},
        "raw": {"any": [1, 2]},
    }
    read = decode(Outer, doc)
    assert (read.name, read.rate, read.when, read.tags) == ("a", 8, "noon", ("x", "y"))
    assert isinstance(read.rate, int)  # kept as written, not 8.0
    assert read.inner.size == 16 and isinstance(read.inner.size, int)
    with pytest.raises(TypeError):
        read.counts["k"] = 3  # type: ignore[index]  # read-only once read
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.name = "b"  # type: ignore[misc]
    assert json.loads(json.dumps(encode(read))) == doc | {"inner": {"size": 16}}


def test_unknown_and_unreadable_keys_are_kept_and_written_back() -> None:
    doc = {"name": 3, "future": {"x": 1}, "inner": {"size": "big", "deep": True}, "tags": "t"}
    read = decode(Outer, doc)
    assert read.name is None and read.inner.size is None and read.tags == ()
    assert read.extra["future"] == {"x": 1} and read.inner.extra["deep"] is True
    assert encode(read) == doc


def test_absent_stays_absent_and_null_stays_null() -> None:
    read = decode(Outer, {"name": None})
    assert read.extra["rate"] is ABSENT
    assert encode(read) == {"name": None}
    assert encode(dataclasses.replace(read, rate=2.5)) == {"name": None, "rate": 2.5}
    made = encode(Outer(name="n"))  # a writer's: every key but the omitted ones
    assert made["rate"] is None and made["maybe"] is None
    assert "at" not in made and "notes" not in made
    assert encode(Outer(notes={"a": "b"}))["notes"] == {"a": "b"}


def test_something_other_than_an_object_reads_as_an_empty_section() -> None:
    assert decode(Inner, "oops").size is None
    assert decode(Outer, {"inner": [1]}).extra["inner"] == [1]
