"""The bottom tier: row groups decoded from the day Parquet files.

The data layer under both the planner and the cache: the cache only decides
*where* bytes come from;
this module is the one place that knows how to read them, and it reads them
exactly as a direct ``ParquetFile(f).read_row_group(i, columns=cols)`` followed
by ``schema.to_numpy`` would (fixed_size_list columns as 2-d arrays).

pyarrow ``ParquetFile`` objects are not shared across threads: each thread
opens its own per file (``threading.local``) and reuses it, so a decode costs
no footer re-parse and no thread ever touches another's file handle.

A file may be a local Path or a ``RemoteFile`` (a day in an object store, read
by range requests through the local tier); ``stats`` counts the bytes this
source took from the store and from the tier.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from tcgexp.data.errors import DataError
from tcgexp.data.remote import FetchStats, RemoteFile, as_file, parquet_file, read_metadata
from tcgexp.data.schema import to_numpy

Key = tuple[int, int]  # (file index, row-group index): the unit the planner plans and the cache keeps
Arrays = dict[str, np.ndarray]


def as_key(key) -> Key:
    """(file, row group) as a tuple of ints, whatever sequence it came in as."""
    if isinstance(key, tuple) and len(key) == 2 and type(key[0]) is int and type(key[1]) is int:
        return key
    try:
        f, rg = key
        return (int(f), int(rg))
    except (TypeError, ValueError):
        raise TypeError(f"row-group key must be (file_index, row_group_index), got {key!r}") from None


def check_values(data: Arrays, *, path: Path, row_group: int) -> None:
    """What the trainer must never be handed silently: non-finite features, illegal labels.

    Runs once per decode (a few % of its cost); the day's manifest checksum covers the
    rest, but a file can be rewritten with its manifest, or written by another tool.
    """

    fix = "rebuild the day from its replay ZIP (delete its .parquet and .manifest.json)"
    feats = data.get("features")
    if feats is not None and not np.isfinite(feats).all():
        row = int(np.argwhere(~np.isfinite(feats))[0][0])
        raise DataError(f"row {row} has non-finite features", path=path, row_group=row_group, fix=fix)
    labels, mask = data.get("label"), data.get("action_mask")
    if labels is not None and mask is not None:
        bad = (labels < 0) | (labels >= mask.shape[1])
        if not bad.any():
            bad = ~mask[np.arange(len(labels)), labels]
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise DataError(
                f"row {row} has label {int(labels[row])}, not a legal action under its action_mask",
                path=path,
                row_group=row_group,
                fix=fix,
            )


def pack(data: Arrays) -> Arrays:
    """The same columns, stored row-major in one read-only byte buffer (each column a view of it).

    A microbatch takes a few hundred scattered rows of a row group; packed per row, that is
    one gather of whole records instead of one per column (13 us against ~85 us for a
    256-row microbatch of the ten train columns), for one copy of the row group (~12 % of
    a decode), which the cache makes on an entry's second touch, never on the cold path.
    Values, dtypes and shapes are unchanged: the views equal a direct read. The copies go
    through [rows, bytes] uint8 views: numpy's structured-field assignment is far slower.
    """
    n = len(next(iter(data.values())))
    dtype = np.dtype([(name, a.dtype, a.shape[1:]) for name, a in data.items()])
    raw = np.empty((n, dtype.itemsize), np.uint8)
    for name, a in data.items():
        offset, width = dtype.fields[name][1], a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
        raw[:, offset : offset + width] = np.ascontiguousarray(a).view(np.uint8).reshape(n, width)
    raw.flags.writeable = False  # before the views are made: they inherit it
    records = raw.view(dtype).reshape(n)
    return {name: records[name] for name in data}


def packed_records(arrays: Arrays) -> tuple[np.ndarray, np.dtype] | None:
    """(the [rows, record bytes] buffer, the record dtype) when `arrays` came from ``pack``.

    numpy collapses view chains, so every column's ``.base`` is the byte buffer itself; the
    record dtype is rebuilt from the columns in order, exactly as ``pack`` built it.
    """
    raw = getattr(next(iter(arrays.values()), None), "base", None)
    if not (isinstance(raw, np.ndarray) and raw.ndim == 2 and raw.dtype == np.uint8):
        return None
    if any(a.base is not raw for a in arrays.values()):
        return None
    dtype = np.dtype([(name, a.dtype, a.shape[1:]) for name, a in arrays.items()])
    return (raw, dtype) if dtype.itemsize == raw.shape[1] else None


class ParquetSource:
    """Validated (file, row group) keys over ``files``, decoded to the ``columns`` projection."""

    def __init__(self, files: Sequence[str | Path], columns: Iterable[str], *, name: str = "cache") -> None:
        self.name = name
        self.columns = list(columns)
        if not self.columns or len(set(self.columns)) != len(self.columns):
            raise ValueError(f"{name}: columns must be a non-empty list without repeats, got {self.columns}")
        self.paths = [as_file(f) for f in files]
        self.stats = FetchStats()
        # Footers only: row-group counts for key checks, and the projection
        # checked against every file now rather than at the first decode.
        self.row_groups: list[int] = []
        for path in self.paths:
            meta = read_metadata(path, self.stats)
            missing = [c for c in self.columns if c not in meta.schema.to_arrow_schema().names]
            if missing:
                raise ValueError(f"{name}: columns {missing} are not in {path}")
            self.row_groups.append(meta.num_row_groups)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[pq.ParquetFile] = []

    def keys(self) -> list[Key]:
        """Every valid key, in file then row-group order."""
        return [(f, rg) for f, n in enumerate(self.row_groups) for rg in range(n)]

    def check(self, key) -> Key:
        """``key`` as a (file, row group) tuple of ints; KeyError when it names nothing."""
        key = as_key(key)
        f, rg = key
        if not (0 <= f < len(self.row_groups) and 0 <= rg < self.row_groups[f]):
            raise KeyError(
                f"{self.name}: no row group {key} (files={len(self.paths)}, row groups per file={self.row_groups})"
            )
        return key

    def read(self, key: Key) -> Arrays:
        """Decode one row group; the arrays come back read-only (they will be shared)."""
        f, rg = key
        if isinstance(self.paths[f], RemoteFile):  # its chunks in one round of concurrent GETs
            self.paths[f].prefetch(rg, self.columns, self.stats)
        table = self._parquet(f).read_row_group(rg, columns=self.columns)
        data = to_numpy(table, self.columns)
        check_values(data, path=self.paths[f], row_group=rg)
        for arr in data.values():
            arr.flags.writeable = False  # shared by every reader from here on
        return data

    def _parquet(self, file_index: int) -> pq.ParquetFile:
        opened = getattr(self._local, "files", None)
        if opened is None:
            opened = self._local.files = {}
        pf = opened.get(file_index)
        if pf is None:
            pf = opened[file_index] = parquet_file(self.paths[file_index], self.stats)
            with self._lock:
                self._opened.append(pf)  # so close() reaches every thread's handles
        return pf

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for pf in opened:
            with contextlib.suppress(Exception):
                pf.close()
