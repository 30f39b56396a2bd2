"""Arrow arrays to and from numpy columns without pandas, for the end of a bench run.

Hand-written because every conversion pyarrow offers between its arrays and numpy or
Python values — ``pa.array`` of a list or an ndarray, ``Array.to_numpy`` — imports pandas
when it is installed (its pandas shim, and the C++ converter's static data), and that
import is 0.15–0.2 CPU-s of a 16-request bench's ~0.7 (``benchmarks/fixed_cost_profile.py``).
What is built here from buffers (``Array.from_buffers``, ``Buffer`` views) is the same
array pyarrow would make, and the tests hold each function to pyarrow's own conversion:

* ``column_of(values)``: JSON values of one journal column as
  ``pa.array(values).to_numpy(zero_copy_only=False)`` gives them — int64 or bool when no
  value is missing, float64 with NaN for numbers with nulls, objects (``None`` for a
  null) for strings, bools with nulls and lists (each list a numpy array);
* ``arrow_of(column)``: such a column as ``pa.array(column)`` makes it (NaN stays a
  value, as there; ``None`` in an object column is a null);
* ``numpy_of(array)``: an arrow (chunked) array as ``to_numpy(zero_copy_only=False)``.

Values outside what the run format writes (dicts, nested mixes, integers past int64, a
column of mixed kinds) go to pyarrow's own conversion, which imports pandas: slower, the
same result (or the same error).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

#: The kinds of a column's non-null Python values this module converts itself.
_BOOL, _INT, _FLOAT, _STR, _LIST = "bool", "int", "float", "str", "list"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _kind(values: Any) -> str | None:
    """What every non-null value is (``None`` when all are null); ``"other"`` for a mix or
    a kind handled by pyarrow."""
    seen: set[type] = {type(v) for v in values if v is not None}
    if not seen:
        return None
    if seen == {bool}:
        return _BOOL
    if seen == {int}:
        return _INT
    if seen <= {int, float}:
        return _FLOAT
    if seen == {str}:
        return _STR
    if seen <= {list, np.ndarray}:
        return _LIST
    return "other"


def _ints(values: list[Any]) -> bool:
    return all(_INT64_MIN <= v <= _INT64_MAX for v in values if v is not None)


def column_of(values: list[Any]) -> np.ndarray:
    """JSON values as ``pa.array(values).to_numpy(zero_copy_only=False)`` (module docstring);
    values pyarrow cannot convert are kept as they are, in an object column."""
    kind = _kind(values)
    missing = any(v is None for v in values)
    if kind is None:
        return _objects(values)
    if kind == _BOOL:
        return _objects(values) if missing else np.array(values, dtype=bool)
    if kind == _INT and _ints(values):
        if not missing:
            return np.array(values, dtype=np.int64)
        return np.array([np.nan if v is None else v for v in values], dtype=float)
    if kind == _FLOAT and _ints([v for v in values if type(v) is int]):
        return np.array([np.nan if v is None else v for v in values], dtype=float)
    if kind == _STR:
        return _objects(values)
    if kind == _LIST and all(isinstance(v, list) for v in values if v is not None):
        flat = [item for v in values if v is not None for item in v]
        child_kind = _kind(flat)
        if child_kind in (_BOOL, _INT, _FLOAT, _STR, None) and not (
            child_kind in (_INT, _FLOAT) and not _ints([x for x in flat if type(x) is int])
        ):
            return _split(column_of(flat), values)
    return _by_pyarrow(values)


def _split(child: np.ndarray, values: list[Any]) -> np.ndarray:
    """A list column's elements as numpy slices of its flattened child (None for a null)."""
    out = np.empty(len(values), dtype=object)
    start = 0
    for i, v in enumerate(values):
        if v is None:
            out[i] = None
            continue
        out[i] = child[start : start + len(v)]
        start += len(v)
    return out


def _objects(values: list[Any]) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def _by_pyarrow(values: list[Any]) -> np.ndarray:
    import pyarrow as pa

    try:
        return pa.array(values).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        return _objects(values)  # mixed types, or past int64: kept as they are


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    """The null bitmap of ``valid`` (None when every value is there)."""
    import pyarrow as pa

    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _fixed(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A numeric or bool array of the same values (nulls where ``valid`` is False)."""
    import pyarrow as pa

    n = len(values)
    nulls = _validity(valid) if valid is not None else None
    if values.dtype == bool:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), n, [nulls, data])
    values = np.ascontiguousarray(values)
    kind = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(kind, n, [nulls, pa.py_buffer(values)])


def _strings(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    import pyarrow as pa

    encoded = [v.encode("utf-8") if ok else b"" for v, ok in zip(values, valid, strict=True)]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    large = offsets[-1] > np.iinfo(np.int32).max
    kind, width = (pa.large_string(), np.int64) if large else (pa.string(), np.int32)
    data = pa.py_buffer(b"".join(encoded))
    buffers = [_validity(valid), pa.py_buffer(offsets.astype(width)), data]
    return pa.Array.from_buffers(kind, len(encoded), buffers)


def _lists(values: np.ndarray, valid: np.ndarray) -> pa.Array | None:
    """A list column from its elements (Python lists, or numpy arrays as ``column_of``
    makes them); None when its child is of a kind left to pyarrow."""
    import pyarrow as pa

    present = [v for v, ok in zip(values, valid, strict=True) if ok]
    arrays = [v for v in present if isinstance(v, np.ndarray)]
    dtypes = {a.dtype for a in arrays}
    if len(arrays) == len(present) and len(dtypes) == 1 and dtypes.pop() != np.dtype(object):
        child = _fixed(np.concatenate(arrays)) if arrays else None
    elif not arrays:
        child = _object_array(_objects([x for v in present for x in v]))
    else:
        child = None  # numpy arrays of several dtypes, or of objects: pyarrow's to infer
    if child is None:
        return None
    sizes = [len(v) if ok else 0 for v, ok in zip(values, valid, strict=True)]
    offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    kind = pa.list_(child.type)
    buffers = [_validity(valid), pa.py_buffer(offsets)]
    return pa.Array.from_buffers(kind, len(sizes), buffers, children=[child])


def _object_array(column: np.ndarray) -> pa.Array | None:
    """An object column as ``pa.array`` infers it, or None for a kind left to pyarrow."""
    import pyarrow as pa

    valid = np.array([v is not None for v in column], dtype=bool)
    kind = _kind(column)
    if kind is None:
        return pa.nulls(len(column))
    present = column[valid]
    if kind == _BOOL:
        filled = np.zeros(len(column), dtype=bool)
        filled[valid] = present.astype(bool)
        return _fixed(filled, valid)
    if kind in (_INT, _FLOAT) and _ints([v for v in present if type(v) is int]):
        dtype = np.int64 if kind == _INT else np.float64
        filled = np.zeros(len(column), dtype=dtype)
        filled[valid] = present.astype(dtype)
        return _fixed(filled, valid)
    if kind == _STR:
        return _strings(column, valid)
    if kind == _LIST:
        return _lists(column, valid)
    return None


def arrow_of(column: np.ndarray) -> pa.Array:
    """A numpy column as ``pa.array(column)`` makes it (module docstring)."""
    if column.dtype.kind in "biuf":
        return _fixed(column)
    if column.dtype == object:
        built = _object_array(column)
        if built is not None:
            return built
    import pyarrow as pa

    return pa.array(column)


def numpy_of(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An arrow array as ``to_numpy(zero_copy_only=False)`` gives it (module docstring)."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        chunks = [numpy_of(chunk) for chunk in array.chunks]
        if not chunks:
            return _empty(array.type)
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    kind = array.type
    n = len(array)
    valid = _valid(array)
    if pa.types.is_null(kind):
        return np.full(n, None, dtype=object)
    if pa.types.is_boolean(kind):
        bits = np.unpackbits(np.frombuffer(array.buffers()[1], dtype=np.uint8), bitorder="little")[
            array.offset : array.offset + n
        ].astype(bool)
        if valid is None:
            return bits
        out = _objects(bits.tolist())
        out[~valid] = None
        return out
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        dtype = _dtype(kind)
        raw = np.frombuffer(array.buffers()[1], dtype=dtype)[array.offset : array.offset + n]
        if valid is None:
            return raw.copy()
        out = raw.astype(np.float64 if dtype.kind in "iu" or dtype.itemsize > 4 else dtype)
        out[~valid] = np.nan
        return out
    if pa.types.is_dictionary(kind):  # each distinct value made once, shared by its rows
        values = np.append(numpy_of(array.dictionary), None)
        indices = numpy_of(array.indices)  # NaN where null (no pyarrow.compute: no pandas)
        if indices.dtype.kind == "f":
            indices = np.where(np.isnan(indices), len(values) - 1, indices)
        return values[indices.astype(np.int64)]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        child = numpy_of(array.values)  # the whole child: offsets index it as they are
        offsets = np.frombuffer(
            array.buffers()[1], dtype=np.int32 if pa.types.is_list(kind) else np.int64
        )[array.offset : array.offset + n + 1]
        out = np.empty(n, dtype=object)
        for i in range(n):
            present = valid is None or valid[i]
            out[i] = child[offsets[i] : offsets[i + 1]] if present else None
        return out
    return _objects(array.to_pylist())


def _valid(array: pa.Array) -> np.ndarray | None:
    """Where ``array`` has a value (None when it has no nulls)."""
    if array.null_count == 0:
        return None
    bitmap = array.buffers()[0]
    if bitmap is None:  # the null type: no bitmap, every value null
        return np.zeros(len(array), dtype=bool)
    return np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")[
        array.offset : array.offset + len(array)
    ].astype(bool)


def _dtype(kind: pa.DataType) -> np.dtype:
    """The numpy dtype of an arrow integer or float type."""
    import pyarrow as pa

    signed = pa.types.is_signed_integer(kind)
    letter = "f" if pa.types.is_floating(kind) else ("i" if signed else "u")
    return np.dtype(f"{letter}{kind.bit_width // 8}")


def _empty(kind: pa.DataType) -> np.ndarray:
    import pyarrow as pa

    if pa.types.is_boolean(kind):
        return np.empty(0, dtype=bool)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return np.empty(0, dtype=_dtype(kind))
    return np.empty(0, dtype=object)
