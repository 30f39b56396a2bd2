"""A plan's requests stored by column, each ``RequestSpec`` built when it is read.

Measurement convention (memory, issue 43; tracemalloc, shared-prefix, 50,000 requests):
held as ``RequestSpec`` objects a plan costs ~570 B a request (27 MiB), and the
oracle's annotated copy doubled it while it was made; the run's RSS level kept that
high-water mark for the whole run. Stored here by column, a request costs ~86 B
(4.1 MiB): a field that holds the same object for every request so far is one
reference (``_Same``: the kind, no tenant, no text …) until a request differs; then
numbers go to typed arrays (``array``: 8 B a value, a byte for "None"), ids to one
UTF-8 buffer, prompts to a table of segments (length, key; explicit tokens kept as the
tuple given), other fields to plain lists of references. A request is built when it is
read and let go by whoever read it: the sender holds only the requests in flight (and a
session's next turn).

Bit for bit: a request read back is equal, field by field and type by type, to the one
stored. A value a typed column cannot hold exactly (a numpy integer, a bool given where
an int is declared, a key beyond 64 bits, a subclass) turns that column into a plain
list of the objects as given; an object that is not exactly a ``RequestSpec`` is kept
as it is.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import fields, replace
from typing import Any, TypeVar, overload
from weakref import WeakValueDictionary

from workloads.request import Prompt, RequestSpec, Segment

__all__ = ["PackedRequests"]

T = TypeVar("T")

_INTS = ("max_tokens", "group", "session", "turn", "expected_cached_tokens")
_FLOATS = ("intended_s", "think_time_s")
_BOOLS = ("warmup", "carries_history")
_FIELDS = tuple(f.name for f in fields(RequestSpec))
_TYPECODES = {int: "q", float: "d", bool: "b"}


class _Objects:
    """Values as given (references: equal values built once are shared)."""

    def __init__(self, values: Iterable[Any] = ()) -> None:
        self.values = list(values)

    def fits(self, value: Any) -> bool:
        return True

    def append(self, value: Any) -> None:
        self.values.append(value)

    def __getitem__(self, i: int) -> Any:
        return self.values[i]

    def __len__(self) -> int:
        return len(self.values)


class _Same:
    """One value for every request so far (the same object: ``is``, so ``0.0`` and
    ``-0.0``, ``1`` and ``True`` stay apart): no memory a request, until one differs."""

    def __init__(self, value: Any, count: int) -> None:
        self.value = value
        self.count = count

    def fits(self, value: Any) -> bool:
        return value is self.value or not self.count

    def append(self, value: Any) -> None:
        self.value = value
        self.count += 1

    def __getitem__(self, i: int) -> Any:
        if not -self.count <= i < self.count:
            raise IndexError(i)
        return self.value

    def __len__(self) -> int:
        return self.count


class _Numbers:
    """Python ints, floats or bools (exactly that type) or None, in a typed array."""

    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.values = array(_TYPECODES[kind])
        self.none = bytearray()

    def fits(self, value: Any) -> bool:
        if value is None:
            return True
        if type(value) is not self.kind:
            return False
        return self.kind is not int or -(1 << 63) <= value < (1 << 63)

    def append(self, value: Any) -> None:
        self.values.append(0 if value is None else value)
        self.none.append(value is None)

    def __getitem__(self, i: int) -> Any:
        if self.none[i]:
            return None
        value = self.values[i]
        return bool(value) if self.kind is bool else value

    def __len__(self) -> int:
        return len(self.values)


class _Strings:
    """``str`` values (or None) in one UTF-8 buffer."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.ends = array("q")
        self.none = bytearray()

    def fits(self, value: Any) -> bool:
        return value is None or type(value) is str

    def append(self, value: Any) -> None:
        if value is not None:
            self.data += value.encode("utf-8", "surrogatepass")
        self.ends.append(len(self.data))
        self.none.append(value is None)

    def __getitem__(self, i: int) -> str | None:
        if self.none[i]:
            return None
        start = self.ends[i - 1] if i else 0
        return self.data[start : self.ends[i]].decode("utf-8", "surrogatepass")

    def __len__(self) -> int:
        return len(self.ends)


class _Prompts:
    """Prompts as runs of a segment table: each segment's length and key (64 bits), or
    its explicit tokens (the tuple given, shared, kept aside by segment index)."""

    def __init__(self) -> None:
        self.ends = array("q")  # per prompt: one past its last segment
        self.lengths = array("q")
        self.keys = array("Q")
        self.tokens: dict[int, tuple[int, ...]] = {}
        #: The segments read and still alive somewhere, by what they are: a segment read
        #: twice (a trace's block in many prompts, a group's prefix) is one object while
        #: anything holds it, as it was when the plan was built, and nothing once not.
        self.alive: WeakValueDictionary[tuple[int, int | None, int], Segment] = (
            WeakValueDictionary()
        )

    def __getstate__(self) -> dict[str, Any]:
        return {name: value for name, value in vars(self).items() if name != "alive"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state, alive=WeakValueDictionary())

    def fits(self, value: Any) -> bool:
        if type(value) is not Prompt:
            return False
        for s in value.segments:
            if type(s) is not Segment or type(s.length) is not int or s.length >= 1 << 63:
                return False
            if s.key is not None and (type(s.key) is not int or not 0 <= s.key < 1 << 64):
                return False
            if s.tokens is not None and type(s.tokens) is not tuple:
                return False
        return True

    def append(self, value: Prompt) -> None:
        for s in value.segments:
            if s.tokens is not None:
                self.tokens[len(self.lengths)] = s.tokens
            self.lengths.append(s.length)
            self.keys.append(s.key or 0)
        self.ends.append(len(self.lengths))

    def __getitem__(self, i: int) -> Prompt:
        start = self.ends[i - 1] if i else 0
        lengths, keys, explicit, alive = self.lengths, self.keys, self.tokens, self.alive
        segments = []
        for k in range(start, self.ends[i]):
            tokens = explicit.get(k)
            key = None if tokens is not None else keys[k]
            # explicit tokens by the tuple's identity: the store holds it, so it is unique
            what = (lengths[k], key, id(tokens))
            segment = alive.get(what)
            if segment is None:
                segment = _built(Segment, length=lengths[k], key=key, tokens=tokens)
                alive[what] = segment
            segments.append(segment)
        return _built(Prompt, segments=tuple(segments))

    def __len__(self) -> int:
        return len(self.ends)


def _built(cls: type[T], **values: Any) -> T:
    """An instance of frozen dataclass ``cls`` holding ``values``, its ``__init__`` (and
    checks) skipped: each value was checked when the object was first made, and a trace's
    request is dozens of segments read several times before it is sent (``__init__``
    sets a frozen field through ``object.__setattr__``: ~1 µs a segment; this, ~0.3)."""
    made = object.__new__(cls)
    made.__dict__.update(values)
    return made


def _column(name: str) -> Any:
    if name == "prompt":
        return _Prompts()
    if name == "id":
        return _Strings()
    if name in _INTS:
        return _Numbers(int)
    if name in _FLOATS:
        return _Numbers(float)
    if name in _BOOLS:
        return _Numbers(bool)
    return _Objects()


def _widened(name: str, column: Any, value: Any) -> Any:
    """A column holding what ``column`` holds that ``value`` fits in: the typed column of
    field ``name`` after a ``_Same``, else (or when that does not fit) plain objects."""
    if isinstance(column, _Same):
        typed = _column(name)
        if typed.fits(value) and (not column.count or typed.fits(column.value)):
            for _ in range(column.count):
                typed.append(column.value)
            return typed
    return _Objects(column[i] for i in range(len(column)))


class _Store:
    """The columns of every request, filled once, read-only after."""

    def __init__(self) -> None:
        self.columns: dict[str, Any] = {name: _Same(None, 0) for name in _FIELDS}
        self.size = 0
        #: Positions holding something other than a ``RequestSpec``, kept as given.
        self.odd: dict[int, Any] = {}

    def add(self, spec: Any) -> None:
        if type(spec) is not RequestSpec:
            self.odd[self.size] = spec
            for name, column in self.columns.items():
                filler = Prompt(()) if isinstance(column, _Prompts) else None
                if not column.fits(filler):
                    column = self.columns[name] = _widened(name, column, filler)
                column.append(filler)
        else:
            for name, column in self.columns.items():
                value = getattr(spec, name)
                if not column.fits(value):
                    column = self.columns[name] = _widened(name, column, value)
                column.append(value)
        self.size += 1

    def spec(self, i: int) -> RequestSpec:
        if self.odd and i in self.odd:
            return self.odd[i]
        return _built(RequestSpec, **{name: column[i] for name, column in self.columns.items()})

    def value(self, name: str, i: int) -> Any:
        if self.odd and i in self.odd:
            return getattr(self.odd[i], name)
        return self.columns[name][i]


class PackedRequests(Sequence[RequestSpec]):
    """Requests in order, stored by column (``_Store``), read as ``RequestSpec`` objects
    built on each read; ``select`` and slices are views on the same store."""

    __slots__ = ("_positions", "_store")

    def __init__(self, store: _Store, positions: array | range | None = None) -> None:
        self._store = store
        self._positions = range(store.size) if positions is None else positions

    @classmethod
    def pack(cls, requests: Iterable[RequestSpec]) -> PackedRequests:
        """``requests`` stored (a generator is consumed one request at a time)."""
        store = _Store()
        for spec in requests:
            store.add(spec)
        return cls(store)

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, i: int) -> RequestSpec: ...
    @overload
    def __getitem__(self, i: slice) -> PackedRequests: ...
    def __getitem__(self, i: int | slice) -> RequestSpec | PackedRequests:
        if isinstance(i, slice):
            return PackedRequests(self._store, self._positions[i])
        return self._store.spec(self._positions[i])

    def __iter__(self) -> Iterator[RequestSpec]:
        spec = self._store.spec
        for p in self._positions:
            yield spec(p)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedRequests({len(self)} requests)"

    def field(self, i: int, name: str) -> Any:
        """Field ``name`` of request ``i``, without building the request."""
        return self._store.value(name, self._positions[i])

    def column(self, name: str) -> list[Any]:
        """Field ``name`` of every request, in order, without building the requests."""
        value = self._store.value
        return [value(name, p) for p in self._positions]

    def select(self, keep: Callable[[int], bool] | Iterable[int]) -> PackedRequests:
        """A view of the requests at the given indices (in the order given), or of those
        whose index ``keep`` accepts."""
        indices = (i for i in range(len(self)) if keep(i)) if callable(keep) else keep
        return PackedRequests(self._store, array("q", (self._positions[i] for i in indices)))

    def with_column(self, name: str, values: Sequence[Any]) -> PackedRequests:
        """A copy whose field ``name`` is ``values`` (one per request, in order), sharing
        every other column (a view is packed anew first)."""
        if len(values) != len(self):
            raise ValueError(f"{len(values)} values for {len(self)} requests")
        whole = self
        if self._positions != range(self._store.size):
            whole = PackedRequests.pack(self)
        store = _Store()
        store.columns = dict(whole._store.columns)
        store.size = whole._store.size
        column: Any = _Same(None, 0)
        for value in values:
            if not column.fits(value):
                column = _widened(name, column, value)
            column.append(value)
        store.columns[name] = column
        store.odd = {i: _replaced(spec, name, values[i]) for i, spec in whole._store.odd.items()}
        return PackedRequests(store)


def _replaced(spec: Any, name: str, value: Any) -> Any:
    return replace(spec, **{name: value})
