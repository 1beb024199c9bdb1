"""The spill's files and folder: one row group's ``.npz`` (its size bound, its record of what was written, read
back verified), the marked spill dir (made, refused, torn down). ``spill.py``'s ``SpillStore`` keeps the index and
the budget over them (its docstring says why each rule exists).
"""

from __future__ import annotations

import os
import threading
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tcgexp.cache import registry
from tcgexp.cache.npz import read_npz
from tcgexp.ownership import (
    SPILL_MARKER,
    HeldLock,
    NotOurs,
    describe,
    held_by_someone,
    is_spill_file,
    read_info,
    remove_owned,
)

MARKER = SPILL_MARKER  # proves a directory is ours to wipe; its flock says its owner lives
_ARRAY_OVERHEAD = 512  # bound on one .npy header + its zip local/central entries
_ARCHIVE_OVERHEAD = 1024  # bound on the zip end records


def write_error(exc: BaseException) -> str:
    """What a write error says about the disk, in words: a read-only file system is not a full disk."""
    import errno

    code = getattr(exc, "errno", None)
    if code == errno.EROFS:
        return "its file system is read-only"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "the disk is full"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return f"{type(exc).__name__}: {exc}"


def estimate_bytes(arrays: dict[str, np.ndarray]) -> int:
    """An upper bound on the size of ``np.savez(**arrays)`` (uncompressed zip)."""
    total = _ARCHIVE_OVERHEAD
    for name, arr in arrays.items():
        total += arr.nbytes + _ARRAY_OVERHEAD + 2 * len(name.encode()) + 24 * arr.ndim
    return total


def checksum(arr: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(arr).view(np.uint8).reshape(-1))


# what was said about a folder of spill dirs, (folder, cause): a read-only disk under a run's two caches is one
# cause, said once, not once per cache per attempt (a run once printed it three times, then four removal warnings
# for two folders). Forgotten when a spill dir is made there again, so a later run on a mended disk hears anew.
_SAID: set[tuple[str, str]] = set()
_SAID_LOCK = threading.Lock()


def say_once(folder: Path, cause: str, message: str, *, stacklevel: int) -> None:
    """Warn `message` unless `cause` was already said for `folder` (the parent of the spill dirs); `stacklevel` as
    ``warnings.warn`` would count it from the caller."""
    with _SAID_LOCK:
        if (str(folder), cause) in _SAID:
            return
        _SAID.add((str(folder), cause))
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)


def _heard(folder: Path) -> None:
    with _SAID_LOCK:
        _SAID.difference_update({k for k in _SAID if k[0] == str(folder)})


def teardown(path: str, lock: HeldLock, entry) -> None:
    """Remove the (marked) dir while its lock is held, then forget its registry entry, then let go of the lock.

    A dir that cannot be removed (its disk turned read-only) stays registered, so a later run reclaims it once it
    can; that is said once for its folder, whatever the number of dirs there. A dir holding what tcgexp did not
    write is ``remove_owned``'s to refuse (its own warning names them)."""
    directory = Path(path)
    try:
        _remove_own(directory)
        registry.unregister(entry)
    except OSError as exc:
        say_once(
            directory.parent,
            write_error(exc),
            f"could not remove the spill under {directory.parent} ({write_error(exc)}): left registered, so a "
            "later run removes it once it can write there; or remove it by hand",
            stacklevel=1,
        )
    finally:
        lock.release()


def _remove_own(directory: Path) -> None:
    """A spill dir holding only its marker and row-group files: those, then the dir (the marker last, so a removal
    cut short stays marked), an error raised. Anything else there: ``remove_owned`` refuses it (and warns)."""
    if not directory.exists() and not directory.is_symlink():
        return
    if directory.is_symlink() or not directory.is_dir() or not (directory / MARKER).is_file():
        remove_owned(directory, MARKER, what="spill dir", ours=is_spill_file)
        return
    entries = [e for e in directory.iterdir() if e.name != MARKER]
    if not all(is_spill_file(e) for e in entries):
        remove_owned(directory, MARKER, what="spill dir", ours=is_spill_file)
        return
    for e in entries:
        e.unlink(missing_ok=True)
    (directory / MARKER).unlink()
    os.rmdir(directory)


def quietly(fn, *args) -> None:
    """Cleanup of a failed write: its own error (ENOENT, EROFS) must not end the run."""
    try:
        fn(*args)
    except OSError:
        pass


# the one member a packed row group is written as: its [rows, record bytes] buffer (``tcgexp.data.source.pack``)
RECORDS = "__records__"


@dataclass(frozen=True)
class Entry:
    path: Path
    size: int
    meta: tuple[tuple[str, str, tuple[int, ...], int], ...]  # each member written: (name, dtype.str, shape, crc32)
    # a packed row group's columns in record order, (name, dtype.str, shape); None: the members are the columns
    columns: tuple[tuple[str, str, tuple[int, ...]], ...] | None = None


def read_verified(entry: Entry, columns: list[str] | None) -> dict[str, np.ndarray]:
    members = [m[0] for m in entry.meta]
    names = members if entry.columns is None else [c[0] for c in entry.columns]
    if columns is not None and list(columns) != names:
        raise ValueError(f"columns {names} != expected {list(columns)}")
    npz = read_npz(entry.path, entry.size)  # never unpickles (npz.py)
    if sorted(npz) != sorted(members):
        raise ValueError(f"members {sorted(npz)} != {sorted(members)}")
    out: dict[str, np.ndarray] = {}
    for name, dtype, shape, crc in entry.meta:
        arr = npz[name]
        if arr.dtype.str != dtype or tuple(arr.shape) != shape:
            raise ValueError(f"{name}: {arr.dtype.str}{arr.shape} != {dtype}{shape}")
        if checksum(arr) != crc:
            raise ValueError(f"{name}: checksum mismatch")
        out[name] = arr
    if entry.columns is None:
        return out
    # the columns as views of the record buffer, as ``pack`` made them (``packed_records`` knows them again)
    raw = out[RECORDS]
    dtype = np.dtype([(name, np.dtype(d), shape[1:]) for name, d, shape in entry.columns])
    if raw.ndim != 2 or raw.shape[1] != dtype.itemsize or raw.base is not None:
        raise ValueError(f"{RECORDS}: {raw.shape} is not a buffer of {dtype.itemsize}-byte records")
    raw.flags.writeable = False  # before the views are made: they inherit it
    records = raw.view(dtype).reshape(raw.shape[0])
    return {name: records[name] for name, _, _ in entry.columns}


def prepare_dir(path: Path) -> HeldLock:
    """Create ``path`` empty and marked, its marker locked. A stale spill dir (marked, its owner dead) is
    emptied of its row-group files; a folder without the marker, or holding anything else, is refused
    (``NotOurs``, one line) with nothing deleted, whatever its files are called; so is a live one."""
    if path.exists() or path.is_symlink():
        if not path.is_dir() or path.is_symlink():
            raise NotOurs(
                f"spill dir {path} exists and is not a folder tcgexp made (a file or a link); nothing was "
                "deleted: move it away, or give the run its own folder"
            )
        marked = (path / MARKER).is_file()
        if marked and held_by_someone(path / MARKER):
            raise NotOurs(
                f"spill dir {path} is in use by a live run ({describe(read_info(path / MARKER))}); "
                "give this cache its own directory"
            )
        entries = [e for e in path.iterdir() if e.name != MARKER]
        foreign = sorted(e.name for e in entries if not is_spill_file(e))
        if entries and (not marked or foreign):
            shown = ", ".join((foreign or sorted(e.name for e in entries))[:3])
            raise NotOurs(
                f"spill dir {path} holds files tcgexp did not write ({shown}"
                f"{'' if marked else f'; no {MARKER} marker'}); refusing to delete any of them - "
                "move them away, or pass a dedicated directory such as <run dir>/.cache_spill/train"
            )
        for entry in entries:  # row-group files of a dead run (checked above)
            entry.unlink()
    path.mkdir(parents=True, exist_ok=True)
    lock = HeldLock(path / MARKER, "spill")  # the marker is the lock file: written with the holder's info
    holder = lock.acquire()
    if holder is not None:  # another store got here between the check and now
        raise NotOurs(f"spill dir {path} is in use by a live run ({describe(holder)})")
    _heard(path.parent)  # its folder takes spill dirs again: what went wrong there before is news again
    return lock
