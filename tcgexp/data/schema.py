"""The Parquet schema of a corpus day, and numpy <-> Arrow conversion.

fixed_size_list columns (features, action_mask, would_ko) map to 2-d numpy
arrays in both directions through the flat child array: no per-row Python.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

SCHEMA_VERSION = 1

SCALAR_COLUMNS: dict[str, pa.DataType] = {
    "episode_id": pa.int64(),
    "side": pa.int8(),
    "step_id": pa.int32(),
    "decision_id": pa.int64(),
    "substep": pa.int16(),
    "new_episode": pa.bool_(),
    "terminal": pa.bool_(),
    "is_self": pa.bool_(),
    "label": pa.int32(),
    "would_ko_valid": pa.bool_(),
    "aux_ko": pa.float32(),
    "aux_prize_delta": pa.float32(),
    "aux_terminal": pa.float32(),
    "aux_return": pa.float32(),
    "aux_valid": pa.bool_(),
}
# name -> (element type, which dimension sizes it: "F" features or "A" actions)
LIST_COLUMNS: dict[str, tuple[pa.DataType, str]] = {
    "features": (pa.float32(), "F"),
    "action_mask": (pa.bool_(), "A"),
    "would_ko": (pa.float32(), "A"),
}
COLUMN_ORDER = [
    "episode_id",
    "side",
    "step_id",
    "decision_id",
    "substep",
    "new_episode",
    "terminal",
    "is_self",
    "features",
    "action_mask",
    "label",
    "would_ko",
    "would_ko_valid",
    "aux_ko",
    "aux_prize_delta",
    "aux_terminal",
    "aux_return",
    "aux_valid",
]
LANE_COLUMNS = ["episode_id", "side", "step_id", "decision_id", "substep"]


def arrow_schema(feature_dim: int, action_dim: int, extra: tuple[pa.Field, ...] = ()) -> pa.Schema:
    """The common columns (every game's), then `extra`: the columns a game adds after them (none for the
    built-in simulator)."""
    dims = {"F": feature_dim, "A": action_dim}
    fields = []
    for name in COLUMN_ORDER:
        if name in LIST_COLUMNS:
            elem, dim = LIST_COLUMNS[name]
            fields.append(pa.field(name, pa.list_(elem, dims[dim]), nullable=False))
        else:
            fields.append(pa.field(name, SCALAR_COLUMNS[name], nullable=False))
    return pa.schema(fields + list(extra), metadata={"tcgexp.schema_version": str(SCHEMA_VERSION)})


WIDTH, UNIT = b"tcgexp.width", b"tcgexp.unit"


def padded_field(name: str, elem: pa.DataType, width: int, unit: int) -> pa.Field:
    """A wide, mostly padded column stored without its padding: each row keeps its values up to its last
    non-zero `unit` (an offered option's vector), and reads back as a 2-d [rows, width] array, zero-padded, as
    a fixed-size list column does. What the cache, the loader and a model see is the same dense array; the
    file holds a fraction of it."""
    return pa.field(
        name, pa.list_(elem), nullable=False, metadata={WIDTH: str(width).encode(), UNIT: str(unit).encode()}
    )


def _padding(field: pa.Field) -> tuple[int, int] | None:
    md = field.metadata or {}
    if WIDTH in md and pa.types.is_list(field.type):
        return int(md[WIDTH]), int(md.get(UNIT, b"1"))
    return None


def _trim(values: np.ndarray, width: int, unit: int, typ: pa.DataType) -> pa.Array:
    n = len(values)
    units = values.reshape(n, width // unit, unit)
    nonzero = units.any(axis=2)
    last = np.where(nonzero.any(axis=1), width // unit - np.argmax(nonzero[:, ::-1], axis=1), 0)
    keep = np.arange(width // unit)[None, :] < last[:, None]
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(last * unit, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(units[keep].reshape(-1), type=typ.value_type))


def _pad(col: pa.Array, width: int) -> np.ndarray:
    offsets = col.offsets.to_numpy()
    offsets = offsets - offsets[0]
    values = col.flatten().to_numpy(zero_copy_only=False)
    n = len(col)
    out = np.zeros((n, width), values.dtype)
    lengths = np.diff(offsets)
    if len(values):
        pos = np.arange(len(values)) - np.repeat(offsets[:-1], lengths) + np.repeat(np.arange(n) * width, lengths)
        out.reshape(-1)[pos] = values
    return out


def numpy_dtype(name: str) -> np.dtype:
    typ = LIST_COLUMNS[name][0] if name in LIST_COLUMNS else SCALAR_COLUMNS[name]
    return np.dtype(typ.to_pandas_dtype())


def to_table(columns: dict[str, np.ndarray], schema: pa.Schema) -> pa.Table:
    """Columns of numpy arrays (2-d for list columns) -> an Arrow table of `schema`."""
    arrays = []
    for field in schema:
        values = np.asarray(columns[field.name])
        padded = _padding(field)
        if padded is not None:
            arrays.append(_trim(values, padded[0], padded[1], field.type))
        elif pa.types.is_fixed_size_list(field.type):
            size = field.type.list_size
            flat = pa.array(values.reshape(-1), type=field.type.value_type)
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, size))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def to_numpy(data: pa.Table | pa.RecordBatch, columns: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Arrow table -> dict of numpy arrays; fixed_size_list columns become N-d."""
    names = list(columns) if columns is not None else data.schema.names
    out: dict[str, np.ndarray] = {}
    for name in names:
        col = data.column(name)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        padded = _padding(data.schema.field(name))
        if padded is not None:
            out[name] = _pad(col, padded[0])
        elif pa.types.is_fixed_size_list(col.type):
            size = col.type.list_size
            flat = col.flatten()  # respects slice offsets, unlike .values
            out[name] = flat.to_numpy(zero_copy_only=False).reshape(-1, size)
        else:
            out[name] = col.to_numpy(zero_copy_only=False)
    return out
