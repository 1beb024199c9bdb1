"""What tcgexp created, and who holds it: markers, owner locks, and deletion of what is ours only.

Why: cleanup paths once removed whatever sat at a configured path
(``shutil.rmtree(spill_root)``), so a misconfigured spill or run dir could
take a user's files with it. Every directory tcgexp creates in order to delete
it later carries a marker file written at creation (JSON: what it is, pid,
host, time); ``remove_owned`` deletes a directory only when its marker is
there, and leaves anything else alone with one warning.

Liveness: a directory in use is held by an ``fcntl.flock`` on a lock file the
owner keeps open for its life. The kernel releases it when the owner dies,
however it dies (SIGKILL included), so "lock free" means "owner dead", with no
pid-reuse guess. flock is per open file description: a second open of the
same file in the same process conflicts too, which is what a run dir's second
run in one process must see. Locks are node-local; on a network filesystem a
lock file records its host, and other hosts' entries are never judged dead.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import re
import shutil
import socket
import warnings
from collections.abc import Callable
from pathlib import Path

from .errors import ConfigError

RUN_LOCK = ".tcgexp-run.lock"  # the lock a live run holds in its folder (tcgexp.lifecycle.rundir); free once it ended
SPILL_MARKER = ".tcgexp-spill"  # a spill dir's marker, and its owner's lock file (tcgexp.cache.spill)
# what a spill store writes in its dir: row groups and their temporary names (tcgexp.cache.spill)
SPILL_FILE = re.compile(r"rg-[0-9A-Za-z_.-]+\.npz|\.rg-[0-9A-Za-z_.-]+\.tmp")


class NotOurs(ConfigError):
    """A path tcgexp would write into or delete holds what tcgexp did not make: refused, nothing touched
    (a ConfigError: one line at every entry point)."""


def is_spill_file(path: Path) -> bool:
    """A regular file named as a spill store names its files (never a link, a folder, a FIFO...)."""
    return bool(SPILL_FILE.fullmatch(path.name)) and path.is_file() and not path.is_symlink()


def holder_info(kind: str) -> dict:
    """Who created or holds something: what it is, pid, host, start time (UTC)."""
    return {
        "kind": kind,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def describe(info: dict) -> str:
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started {info.get('started', '?')}"


def killed_while(holder: dict) -> str:
    """How a run that left no record ended, and what it was doing (its lock file's last ``phase``)."""
    phase = holder.get("phase")
    return (
        f"ended without a record{f' while {phase}' if isinstance(phase, str) and phase else ''}: killed by a signal "
        "(SIGKILL, the kernel's OOM killer, a crash such as SIGBUS or SIGSEGV) or a lost machine"
    )


def read_info(path: Path) -> dict:
    """A marker's or lock file's JSON; {} when missing, empty or not JSON (an older, empty marker)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_marker(directory: Path, name: str, kind: str) -> None:
    (Path(directory) / name).write_text(json.dumps(holder_info(kind)))


def remove_owned(
    directory: Path, marker: str, *, what: str = "directory", ours: Callable[[Path], bool] | None = None
) -> bool:
    """Remove `directory` if it carries `marker` (tcgexp made it); else leave it and warn. True if removed.

    `ours`: which entries tcgexp put there (a spill dir: its row-group files); a marked directory
    holding anything else is left whole, with a warning, nothing in it deleted. The marker goes last,
    so a removal cut short (killed, or a read-only disk) leaves what is left still marked and
    removable later. Errors are warnings: cleanup never ends a run.
    """
    directory = Path(directory)
    if not directory.exists() and not directory.is_symlink():
        return False
    if directory.is_symlink() or not directory.is_dir() or not (directory / marker).is_file():
        warnings.warn(
            f"not deleting {what} {directory}: tcgexp did not create it (no {marker} marker); left as it is",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    try:
        entries = [e for e in directory.iterdir() if e.name != marker]
        foreign = [e.name for e in entries if ours is not None and not ours(e)]
        if foreign:
            warnings.warn(
                f"not deleting {what} {directory}: it holds files tcgexp did not write "
                f"({', '.join(sorted(foreign)[:3])}); left as it is",
                RuntimeWarning,
                stacklevel=2,
            )
            return False
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        (directory / marker).unlink()
        directory.rmdir()
    except OSError as exc:
        warnings.warn(f"could not remove {what} {directory} ({exc}); remove it by hand", RuntimeWarning, stacklevel=2)
        return False
    return True


def spill_root_of(run_dir: Path, rank: int = 0) -> Path:
    """Where a run keeps its spill (``.cache_spill``): each rank of a distributed run its own."""
    return Path(run_dir) / (f".cache_spill.rank{rank}" if rank else ".cache_spill")


def pid_alive(pid) -> bool:
    """Whether a process of this host has `pid` (for owners that record a pid, not a lock)."""
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_spill_root(spill_root: Path) -> None:
    """A run's ``.cache_spill``: its marked spill dirs, then itself if that left it empty.

    Each cache removes its own dir; what is left here is a stray of a dead run (removed) or
    something tcgexp did not make (left, with a warning).
    """
    spill_root = Path(spill_root)
    if spill_root.is_symlink() or not spill_root.is_dir():
        return
    foreign, stuck = [], []
    for child in sorted(spill_root.iterdir()):
        if child.is_dir() and not child.is_symlink() and (child / SPILL_MARKER).is_file():
            with warnings.catch_warnings(record=True) as said:  # said once for the folder, below
                warnings.simplefilter("always")
                if not remove_owned(child, SPILL_MARKER, what="spill dir", ours=is_spill_file):
                    stuck.append((child.name, said[-1].message if said else None))
        else:
            foreign.append(child.name)
    causes = {str(m) for _, m in stuck if m is not None and "could not remove" not in str(m)}
    for cause in sorted(causes):  # a marked dir holding files tcgexp did not write: its own line, as before
        warnings.warn(cause, RuntimeWarning, stacklevel=1)
    # a marked dir that could not be removed (a read-only disk): its cache has said so already, naming the
    # folder; it stays marked, and the next run in this folder removes it once it can write there
    if foreign:  # said once for the folder, whatever it holds (a run's whole folder put there once made 7 warnings)
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        warnings.warn(
            f"not deleting what tcgexp did not create in {spill_root} ({shown}: no {SPILL_MARKER} marker); left as "
            "it is",
            RuntimeWarning,
            stacklevel=1,  # (called from an ExitStack: the caller's frame would be contextlib's)
        )
    try:
        spill_root.rmdir()  # only ever removes an empty directory
    except OSError:
        pass


def make_spill_root(spill_root: Path) -> None:
    """Create a run's ``.cache_spill`` (or find it): a file, a link or anything but a folder there is
    refused in one line, never replaced."""
    spill_root = Path(spill_root)
    if spill_root.is_symlink() or (spill_root.exists() and not spill_root.is_dir()):
        raise NotOurs(
            f"{spill_root} is not a folder tcgexp made (a {'link' if spill_root.is_symlink() else 'file'}); "
            "nothing was deleted: move it away, or give the run its own folder (hydra.run.dir=...)"
        )
    spill_root.mkdir(exist_ok=True)


def tree_bytes(directory: Path) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


class HeldLock:
    """An exclusive flock on `path` for the holder's life, the holder's info written inside.

    ``acquire()`` returns None when it is held, or the holder's info (dict) when another holds it.
    The file itself is never deleted: removing a lock file while another process has it open
    would let two holders lock two different files of the same name.
    """

    def __init__(self, path: Path, kind: str) -> None:
        self.path, self.kind = Path(path), kind
        self._fh = None  # a file object, not a bare fd: if its holder is garbage-collected, so is the lock
        self.before = ""  # the file's content before this holder wrote its own

    def acquire(self) -> dict | None:
        # Held through a read-only handle: a file kept open for writing would stop its filesystem
        # from being remounted read-only (EBUSY), and the holder has nothing to write after this.
        fh = os.fdopen(os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644), "r")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return read_info(self.path) or {"pid": "?", "host": "?", "started": "?"}
        try:  # ours now: the holder's info, for whoever finds it held
            with open(self.path, "r+") as out:
                self.before = out.read()  # put back by a holder that was refused (release(restore=True))
                out.seek(0)
                out.truncate(0)
                out.write(json.dumps(holder_info(self.kind)))
        except BaseException:
            fh.close()
            raise
        self._fh = fh
        return None

    @property
    def held(self) -> bool:
        return self._fh is not None

    def release(self, *, restore: bool = False) -> None:
        """Let go; `restore`: a holder refused before it did anything puts the file's content back as it was (a
        refused command writes nothing)."""
        if self._fh is not None:
            if restore:
                try:
                    with open(self.path, "r+") as out:
                        out.truncate(0)
                        out.write(self.before)
                except OSError:
                    pass
            fh, self._fh = self._fh, None
            fh.close()  # closing the last descriptor releases the flock


def held_by_someone(path: Path) -> bool | None:
    """Is the flock on `path` held? True / False; None when the file is missing or cannot be opened.

    Opened read-only without O_CREAT: probing must never create or change anything.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
