"""The local disk tier: column chunks fetched from an object store, kept across epochs and runs.

Why a tier of its own and not the spill: the spill lives and dies with one run
(decoded arrays, per run folder); the tier holds the *compressed bytes* a
remote corpus is made of, so a second epoch, a second run, or a parallel job
of the same sweep reads them from local disk instead of the network.

- An entry is one part of a published day file (a row group's column chunk,
  the footer, ...), named ``<file sha256>/<offset>-<part sha256>``: the day
  file's fingerprint (its content checksum from the manifest) and the part's
  own checksum. A day republished with other bytes has another manifest, so
  other names: a stale entry can never be served.
- Every read is checked against the part's checksum; a damaged entry is
  removed and counts as a miss (the caller fetches again), never as data.
- Writes go to a unique temporary name, then ``os.replace``: concurrent jobs
  writing the same entry both write the same bytes, and a reader sees a whole
  entry or none. A reader whose entry was evicted under it gets a miss.
- A byte budget: past it, the least recently used entries (mtime, touched on
  every hit) go first, one evicting process at a time (flock on ``.lock``).
  A job counts its own writes between scans of the folder, so concurrent
  jobs can pass the budget by what each wrote since its last scan (at most
  10 % of the budget and one entry each) until one of them scans again.
- Published manifests are kept too (``manifests/``), named by the object's
  URI, size and modification time as the store reports them (one HEAD, no
  body) and by their own checksum: a run whose days are unchanged downloads
  no manifest again. A republished day has another manifest (written after
  its old one was deleted), so another size or time; a stale manifest could
  at worst pair with other bytes, which the parts' checksums refuse.
- Ownership as for spill (``tcgexp.ownership``): the tier folder carries the
  marker ``.tcgexp-tier``; a folder that holds anything else without it is
  refused, and eviction deletes only files named like entries. Temporary files
  of writers that died (their pid gone, this host) are reclaimed at open.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import socket
import warnings
from pathlib import Path

from ..ownership import pid_alive, write_marker
from .errors import DataError

TIER_MARKER = ".tcgexp-tier"
_ENTRY = re.compile(r"^\d+-[0-9a-f]{64}$")
_DIR = re.compile(r"^[0-9a-f]{64}$")
_TMP = re.compile(r"^\.(?P<name>\d+-[0-9a-f]{64})\.(?P<host>.+)\.(?P<pid>\d+)\.(?P<tid>\d+)\.tmp$")
_MANIFEST = re.compile(r"^(?P<key>[0-9a-f]{32})-(?P<size>\d+)-(?P<mtime>\d+)-(?P<sha>[0-9a-f]{64})\.json$")
_MANIFEST_TMP = re.compile(
    r"^\.[0-9a-f]{32}-\d+-\d+-[0-9a-f]{64}\.json"
    r"\.(?P<host>.+)\.(?P<pid>\d+)\.(?P<tid>\d+)\.tmp$"
)
EVICT_TO = 0.9  # evict to 90 % of the budget, so a full tier does not scan on every put


def default_tier_dir() -> Path:
    """$TCGEXP_STATE_DIR/tier (tests and per-user setups), else the user's cache folder."""
    if os.environ.get("TCGEXP_STATE_DIR"):
        return Path(os.environ["TCGEXP_STATE_DIR"]).expanduser() / "tier"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "tcgexp" / "tier"


class Tier:
    """Verified, budgeted, shared local copies of remote byte ranges."""

    def __init__(self, root: str | Path | None, budget_bytes: int) -> None:
        self.root = Path(root).expanduser().absolute() if root else default_tier_dir()
        self._root = str(self.root)
        self.budget = int(budget_bytes)
        self.enabled = self.budget > 0
        self._usage: int | None = None  # this process's estimate; a real scan decides evictions
        if self.enabled:
            self._claim()

    def _claim(self) -> None:
        key = "dataset.storage.tier_dir"
        if self.root.exists() and not self.root.is_dir():
            raise DataError("the local tier is not a directory", path=self.root, fix=f"point {key} at a folder")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if not (self.root / TIER_MARKER).is_file():
                # someone else's files: the tier would evict them (looked at again after listing: a job beside
                # this one that claimed the empty folder a moment ago has its marker there by now)
                if any(self.root.iterdir()) and not (self.root / TIER_MARKER).is_file():
                    raise DataError(
                        f"the local tier folder holds files tcgexp did not put there (no {TIER_MARKER} marker)",
                        path=self.root,
                        fix=f"point {key} at an empty folder or an existing tcgexp tier",
                    )
                write_marker(self.root, TIER_MARKER, "tier")
            (self.root / ".lock").touch()
        except OSError as exc:
            raise DataError(
                f"the local tier cannot be written ({exc.strerror})",
                path=self.root,
                fix=f"point {key} at a writable folder, or set dataset.storage.tier_budget_bytes=0 to "
                "read every chunk from the store",
            ) from exc
        self._reclaim_tmp()

    # -- entries ---------------------------------------------------------------------------
    def path(self, file_sha: str, offset: int, part_sha: str) -> Path:
        return Path(self.entry(file_sha, offset, part_sha))

    def entry(self, file_sha: str, offset: int, part_sha: str) -> str:
        """The entry's path as a string: a warm read looks up ~10 entries a row group, where pathlib costs."""
        return f"{self._root}/{file_sha}/{offset}-{part_sha}"

    def has(self, file_sha: str, offset: int, part_sha: str) -> bool:
        return os.path.exists(self.entry(file_sha, offset, part_sha))

    def get(self, file_sha: str, offset: int, part_sha: str) -> bytes | None:
        """The entry's bytes if present and intact; a damaged entry is removed and is a miss."""
        if not self.enabled:
            return None
        path = self.entry(file_sha, offset, part_sha)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:  # absent, or evicted by another job between its listing and our read
            return None
        if hashlib.sha256(data).hexdigest() != part_sha:
            warnings.warn(
                f"local tier entry {path} is damaged; removed, fetching it again", RuntimeWarning, stacklevel=2
            )
            self._unlink(Path(path))
            return None
        try:
            os.utime(path)  # recently used: eviction takes the least recently used first
        except OSError:
            pass
        return data

    def put(self, file_sha: str, offset: int, part_sha: str, data: bytes) -> None:
        """Store verified bytes (the caller checked them); errors cost the tier, never the read."""
        if not self.enabled or len(data) > self.budget:
            return
        path = self.path(file_sha, offset, part_sha)
        tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.{_thread_id()}.tmp")
        try:
            path.parent.mkdir(exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            self._unlink(tmp)
            warnings.warn(
                f"local tier {self.root}: cannot store a chunk ({exc}); it will be fetched again next time",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        if self._usage is None:
            self._usage = self.usage()
        else:
            self._usage += len(data)
        if self._usage > self.budget:
            self._usage = self.evict()

    # -- published manifests ------------------------------------------------------------
    def _manifests(self, uri: str) -> tuple[Path, str]:
        return self.root / "manifests", hashlib.sha256(uri.encode()).hexdigest()[:32]

    def manifest(self, uri: str, size: int, mtime_ns: int) -> bytes | None:
        """The manifest kept for the object `uri` as the store describes it now, if intact; else None."""
        if not self.enabled:
            return None
        folder, key = self._manifests(uri)
        for entry in _scandir(folder):
            m = _MANIFEST.match(entry.name)
            if m and m["key"] == key and int(m["size"]) == size and int(m["mtime"]) == mtime_ns:
                try:
                    with open(entry.path, "rb") as fh:
                        data = fh.read()
                except OSError:
                    return None
                if hashlib.sha256(data).hexdigest() == m["sha"]:
                    return data
                self._unlink(Path(entry.path))  # damaged: fetched again
        return None

    def put_manifest(self, uri: str, size: int, mtime_ns: int, data: bytes) -> None:
        """Keep a downloaded manifest (replacing the object's older ones); errors cost the cache, never the read."""
        if not self.enabled:
            return
        folder, key = self._manifests(uri)
        name = f"{key}-{size}-{mtime_ns}-{hashlib.sha256(data).hexdigest()}.json"
        tmp = folder / f".{name}.{socket.gethostname()}.{os.getpid()}.{_thread_id()}.tmp"
        try:
            folder.mkdir(exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, folder / name)
        except OSError:
            self._unlink(tmp)
            return
        for entry in _scandir(folder):
            m = _MANIFEST.match(entry.name)
            if m and m["key"] == key and entry.name != name:
                self._unlink(Path(entry.path))

    # -- budget ----------------------------------------------------------------------------
    def _entries(self) -> list[tuple[float, int, Path]]:
        """(mtime, size, path) of every entry; only names tcgexp gives entries are ever seen here."""
        out = []
        for d in _scandir(self.root):
            if not (d.is_dir(follow_symlinks=False) and _DIR.match(d.name)):
                continue
            for e in _scandir(Path(d.path)):
                if _ENTRY.match(e.name) and e.is_file(follow_symlinks=False):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    out.append((st.st_mtime, st.st_size, Path(e.path)))
        return out

    def usage(self) -> int:
        return sum(size for _, size, _ in self._entries())

    def evict(self) -> int:
        """Remove least recently used entries down to EVICT_TO x budget; the bytes left."""
        with open(self.root / ".lock") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one evictor at a time; readers and writers never wait
            entries = sorted(self._entries())
            total = sum(size for _, size, _ in entries)
            for _, size, path in entries:
                if total <= EVICT_TO * self.budget:
                    break
                if self._unlink(path):
                    total -= size
            for d in _scandir(self.root):
                if d.is_dir(follow_symlinks=False) and _DIR.match(d.name):
                    try:
                        os.rmdir(d.path)  # only an emptied file folder goes
                    except OSError:
                        pass
        return total

    def _reclaim_tmp(self) -> None:
        """Temporary files left by writers that died on this host (a live writer's are left alone)."""
        host = socket.gethostname()
        folders = [Path(d.path) for d in _scandir(self.root) if d.is_dir(follow_symlinks=False) and _DIR.match(d.name)]
        for folder in [*folders, self.root / "manifests"]:
            for e in _scandir(folder):
                m = _TMP.match(e.name) or _MANIFEST_TMP.match(e.name)
                if m and m["host"] == host and not pid_alive(m["pid"]):
                    self._unlink(Path(e.path))

    @staticmethod
    def _unlink(path: Path) -> bool:
        try:
            path.unlink()
            return True
        except OSError:
            return False


def _scandir(path: Path) -> list:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def _thread_id() -> int:
    import threading

    return threading.get_ident()
