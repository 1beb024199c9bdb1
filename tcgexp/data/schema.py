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


def list_field(name: str, elem: pa.DataType, size: int) -> pa.Field:
    """A game's own fixed-size list column (it reads back as a 2-d array, as every list column does)."""
    return pa.field(name, pa.list_(elem, size), nullable=False)


def numpy_dtype(name: str) -> np.dtype:
    typ = LIST_COLUMNS[name][0] if name in LIST_COLUMNS else SCALAR_COLUMNS[name]
    return np.dtype(typ.to_pandas_dtype())


def to_table(columns: dict[str, np.ndarray], schema: pa.Schema) -> pa.Table:
    """Columns of numpy arrays (2-d for list columns) -> an Arrow table of `schema`."""
    arrays = []
    for field in schema:
        values = np.asarray(columns[field.name])
        if pa.types.is_fixed_size_list(field.type):
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
        if pa.types.is_fixed_size_list(col.type):
            size = col.type.list_size
            flat = col.flatten()  # respects slice offsets, unlike .values
            out[name] = flat.to_numpy(zero_copy_only=False).reshape(-1, size)
        else:
            out[name] = col.to_numpy(zero_copy_only=False)
    return out
