"""The SSD spill tier: evicted row groups as ``.npz`` files, under a disk budget.

Why each rule exists:

- Read back straight into arrays (``npz.py``: never unpickles, as ``np.load(allow_pickle=False)``) and checked against the
  column names, dtypes, shapes and a CRC-32 per array recorded in memory at
  write time: a spill file is a cache, never a source of truth, so a
  truncated, replaced, pickled or vanished file must be noticed (counted in
  ``spill_errors``, deleted) and the caller re-decodes from Parquet.
- Written to a temporary name and renamed: a reader never sees half a file,
  and a failed write leaves nothing behind.
- A byte budget covering finished files *and* writes in progress (reserved
  with a safe upper-bound estimate before writing): the seed's spill dirs once
  filled a disk mid-run, so the total is never allowed past the budget.
- The directory carries a marker (``.tcgexp-spill``: creating pid, host,
  time) whose flock the store holds for its life (``tcgexp.ownership``): only
  a marked directory is ever deleted, and a marked one whose lock is free
  belongs to a dead run. It is registered (``registry.py``) so a later run
  anywhere reclaims it after a SIGKILL; reopening the same path wipes it too.
  It is removed by ``close()`` or, if that is forgotten, by a
  ``weakref.finalize`` (garbage collection or interpreter exit).
- An error of any kind while writing (disk full, a filesystem turned
  read-only, even the cleanup's own unlink failing) disables spilling for this
  store with one warning: the cache keeps working, only slower.
- Room for what matters more on the same disk: ``keep_free`` (the run's: the
  bytes its next checkpoint needs, when the checkpoints share the spill's
  filesystem) is left free beside the byte budget; a write that would eat into
  it drops older files first, or is skipped. The spill is a cache: a run once
  filled a small disk with it and then failed its next checkpoint. And when the
  disk fills anyway, ``give_back`` empties the store and turns it off, so the
  checkpoint that failed can be written again.

Thread safety: a private lock guards the index and the counters; file I/O runs
outside it. A load racing a budget drop of the same file is not an error.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np

from tcgexp.cache import registry
from tcgexp.cache.spill_files import (
    MARKER,  # noqa: F401 - where callers have found it
    RECORDS,
    Entry,
    checksum,
    estimate_bytes,
    prepare_dir,
    quietly,
    read_verified,
    teardown,
    write_error,
)
from tcgexp.data.source import packed_records

log = logging.getLogger(__name__)


class SpillStore:
    """``put`` / ``load`` / ``close`` over one private directory of .npz files."""

    def __init__(
        self, directory: str | os.PathLike, budget_bytes: int, keep_free: Callable[[Path], int] | None = None
    ) -> None:
        self.dir = Path(directory)
        self.budget = int(budget_bytes)
        self.keep_free = keep_free  # bytes to leave free on the spill's filesystem (given the spill dir), or None
        lock = prepare_dir(self.dir)
        entry = registry.register(self.dir)
        self._finalizer = weakref.finalize(self, teardown, str(self.dir), lock, entry)
        self._lock = threading.Lock()
        self._index: OrderedDict[object, Entry] = OrderedDict()  # oldest write first
        self._writing: set = set()
        self._reserved = 0  # estimated bytes of writes in progress
        self._bytes = 0  # bytes of finished files
        self.enabled = self.budget > 0
        self.closed = False
        self.hits = 0
        self.bytes_read = 0  # bytes of arrays read back (the hits'): the spill's share of what the cache moved
        self.spills = 0
        self.errors = 0
        self.skipped = 0  # not written: larger than the budget or no room worth making
        self.dropped = 0  # deleted to stay within the budget
        self.disabled_reason: str | None = None  # why a write error turned spilling off, in words (the report)

    # -- queries ------------------------------------------------------------
    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._index

    def keys(self) -> list:
        with self._lock:
            return list(self._index)

    # what a cache without a spill store reports
    NO_COUNTERS: ClassVar[dict[str, int]] = {
        "ssd_hits": 0,
        "ssd_bytes_read": 0,
        "ssd_spills": 0,
        "ssd_resident": 0,
        "ssd_bytes": 0,
        "spill_errors": 0,
        "spill_skipped": 0,
        "spill_dropped": 0,
        "spill_disabled": 0,
    }

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {
                "ssd_hits": self.hits,
                "ssd_bytes_read": self.bytes_read,
                "ssd_spills": self.spills,
                "ssd_resident": len(self._index),
                "ssd_bytes": self._bytes,
                "spill_errors": self.errors,
                "spill_skipped": self.skipped,
                "spill_dropped": self.dropped,
                "spill_disabled": int(not self.enabled),
            }

    # -- write --------------------------------------------------------------
    def put(self, key, arrays: dict[str, np.ndarray], *, rank: float | None = None, ranks: dict | None = None) -> bool:
        """Spill ``arrays`` for ``key``; True when a file now holds them.

        Room is made oldest file first, or, when ``ranks`` (key -> next use,
        the plan policy's snapshot) is given, furthest next use first and only
        among files needed later than this one (``rank``): dropping a file
        needed sooner than the newcomer would be the wrong trade, so the
        newcomer is skipped instead.
        """
        if any(a.dtype.hasobject for a in arrays.values()):
            return False  # never write anything that would need pickle to read
        need = estimate_bytes(arrays)
        short = self._disk_short(need)  # bytes the disk lacks for this file beside what must stay free
        with self._lock:
            if not self.enabled or self.closed or key in self._index or key in self._writing:
                return False  # the row group's bytes never change: one file suffices
            disk = 0 if short is None else short + self._reserved  # writes in progress are not on the disk yet
            if need > self.budget or not self._make_room(need, rank, ranks, disk):
                self.skipped += 1
                return False
            self._reserved += need
            self._writing.add(key)
        stem = f"rg-{'-'.join(str(part) for part in key)}" if isinstance(key, tuple) else f"rg-{key}"
        final = self.dir / f"{stem}.npz"
        tmp = self.dir / f".{stem}.{uuid.uuid4().hex}.tmp"
        # a row group the cache packed row-major is written as its one record buffer and read back packed, so a
        # spill hit is not packed again on its next touch (nor its strided columns copied out to be written)
        packed = packed_records(arrays)
        members = {RECORDS: packed[0]} if packed is not None else arrays
        columns = tuple((name, a.dtype.str, tuple(a.shape)) for name, a in arrays.items()) if packed else None
        try:
            meta = tuple((name, a.dtype.str, tuple(a.shape), checksum(a)) for name, a in members.items())
            with open(tmp, "wb") as fh:  # a file object: savez must not append its own suffix
                np.savez(fh, **members)  # object dtypes were refused above
            size = tmp.stat().st_size
            os.replace(tmp, final)
        except Exception as exc:  # noqa: BLE001 - of any kind: the spill is a cache, never worth the run
            quietly(tmp.unlink, True)
            with self._lock:
                self._reserved -= need
                self._writing.discard(key)
                self._disable(exc)
            return False
        except BaseException:
            quietly(tmp.unlink, True)
            with self._lock:
                self._reserved -= need
                self._writing.discard(key)
            raise
        with self._lock:
            self._reserved -= need
            self._writing.discard(key)
            # size <= need by construction of the estimate; the check keeps the
            # budget exact even if that bound were ever wrong.
            if self.closed or self._bytes + self._reserved + size > self.budget:
                quietly(final.unlink, True)
                return False
            self._index[key] = Entry(final, size, meta, columns)
            self._bytes += size
            self.spills += 1
        return True

    def _disk_short(self, need: int) -> int | None:
        """How many bytes the spill's filesystem lacks to take `need` more while leaving ``keep_free`` free (<= 0:
        none), or None when nothing is to be kept free there."""
        if self.keep_free is None:
            return None
        try:
            keep = int(self.keep_free(self.dir))
            if keep <= 0:
                return None
            st = os.statvfs(self.dir)
        except (OSError, ValueError):
            return None
        return need + keep - st.f_bavail * st.f_frsize

    def _make_room(self, need: int, rank: float | None, ranks: dict | None, disk_short: int = 0) -> bool:
        """Under the lock: drop files until ``need`` more bytes fit the budget and the disk has ``disk_short`` more
        bytes free (what this store's own files give back), or change nothing."""
        excess = max(self._bytes + self._reserved + need - self.budget, disk_short)
        if excess <= 0:
            return True
        if ranks is None:
            order = list(self._index)
        else:
            inf = float("inf")
            order = sorted(self._index, key=lambda k: ranks.get(k, inf), reverse=True)
            if rank is not None:
                order = [k for k in order if ranks.get(k, inf) > rank]
        chosen, freed = [], 0
        for key in order:
            if freed >= excess:
                break
            chosen.append(key)
            freed += self._index[key].size
        if freed < excess:
            return False
        for key in chosen:
            self._drop(key)
            self.dropped += 1
        return True

    def _drop(self, key) -> None:
        entry = self._index.pop(key)
        self._bytes -= entry.size
        try:
            entry.path.unlink(missing_ok=True)
        except OSError:
            pass

    def _disable(self, exc: BaseException) -> None:
        # Said when it happens, without its cause: the cache's report (``diagnose``, the run's end-of-run
        # "[cache] ... turned off after a write error (<cause>)" line) says the cause once, with what to change.
        # A run once told one read-only disk three times: this warning, a log line, and that report line.
        if self.enabled and not self.closed:
            self.disabled_reason = write_error(exc)
            warnings.warn(
                f"row-group spill to {self.dir} disabled at a failed write; evicted row groups are re-decoded "
                "from Parquet (the cache's report says why, and what to change)",
                RuntimeWarning,
                stacklevel=4,
            )
            log.debug("spill to %s disabled: %s", self.dir, exc)  # the raw error, for a debugging handler only
        self.enabled = False

    # -- read ---------------------------------------------------------------
    def load(self, key, columns: list[str] | None = None) -> dict[str, np.ndarray] | None:
        """The spilled arrays of ``key``, verified; None when absent or bad (then deleted)."""
        with self._lock:
            entry = self._index.get(key)
        if entry is None:
            return None
        try:
            out = read_verified(entry, columns)
        except Exception as exc:  # noqa: BLE001 - any failure at all means "not usable": re-decode
            with self._lock:
                if self._index.get(key) is entry:  # not a concurrent budget drop
                    self._drop(key)
                    self.errors += 1
                    log.warning("spill file %s unusable (%s: %s); re-decoding", entry.path, type(exc).__name__, exc)
            return None
        with self._lock:
            self.hits += 1
            self.bytes_read += sum(arr.nbytes for arr in out.values())
        return out

    def keep_reserve(self) -> int:
        """After the disk's use grew elsewhere (a checkpoint was written): drop the oldest files until ``keep_free``
        is free again; the bytes dropped."""
        short = self._disk_short(0)
        if short is None or short <= 0:
            return 0
        with self._lock:
            before = self._bytes
            self._make_room(0, None, None, short + self._reserved)
            return before - self._bytes

    def give_back(self, reason: str) -> int:
        """The disk filled anyway: every file deleted and spilling turned off for this store (``reason`` is what the
        report says); the bytes freed. What needed the space (a checkpoint) is worth more than the cache."""
        with self._lock:
            freed = self._bytes
            for key in list(self._index):
                self._drop(key)
            if self.enabled:
                self.disabled_reason = reason
            self.enabled = False
        return freed

    def discard(self, key) -> None:
        with self._lock:
            if key in self._index:
                self._drop(key)

    # -- teardown -----------------------------------------------------------
    def close(self) -> None:
        """Forget every file and remove the directory; safe to call twice."""
        with self._lock:
            self.closed = True
            self._index.clear()
            self._bytes = 0
        self._finalizer()

    def __repr__(self) -> str:
        return f"SpillStore({str(self.dir)!r}, files={len(self._index)}, bytes={self._bytes}/{self.budget})"
