"""A published day file read by range requests, through the local tier, checked part by part.

Publishing (``publish.py``) cuts each day file into *parts* that cover it
exactly (the header, every row group's column chunks, the footer) and records
each part's offset, length and sha256 in the published manifest. Reading a
row group asks pyarrow for the column chunks it needs; each becomes one part
served from the local tier (``tier.py``) or fetched with one ranged GET, checked
against the manifest, then kept in the tier. So:

- only the column chunks a reader asks for cross the network (the lane index
  fetches the four lane columns, the trainer's cache the ten it trains on);
- a damaged object (bytes that differ from the manifest) is fetched once
  more, then refused with a DataError naming the file, row group and column;
  a truncated or replaced object is refused by its size before any read;
- the footer is a part like any other, parsed once per process, and handed to
  pyarrow with the file, so pyarrow never reads the tail speculatively.

``FetchStats`` counts what a reader took from the store and from the tier;
the row-group cache reports them as ``remote_bytes`` and ``tier_bytes``.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DataError
from .store import Store
from .tier import Tier

REPUBLISH = "publish the day again from a verified local copy (tcgexp-data action=publish target=...)"


class FetchStats:
    """Bytes one reader took from the store and from the local tier (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.remote_bytes = 0
        self.tier_bytes = 0

    def add(self, remote: int = 0, tier: int = 0) -> None:
        with self._lock:
            self.remote_bytes += remote
            self.tier_bytes += tier


class RemoteFile:
    """One published day file; shared by every reader of a run (its handle and parsed footer too)."""

    def __init__(self, store: Store, rel: str, manifest: dict, tier: Tier) -> None:
        self.store, self.rel, self.manifest, self.tier = store, rel, manifest, tier
        self.uri = f"{store.uri}/{rel}"
        self.size = int(manifest["file_bytes"])
        self.file_sha = manifest["sha256"]
        parts = manifest.get("parts")
        if not isinstance(parts, list) or not parts:
            raise DataError(
                "the published manifest has no parts (published by an older tcgexp?)", path=self.uri, fix=REPUBLISH
            )
        self.parts = sorted(parts, key=lambda p: p["offset"])
        self._starts = [p["offset"] for p in self.parts]
        self._lock = threading.Lock()
        self._handle: int | None = None  # the object opened in the store's client process
        self._metadata: pq.FileMetaData | None = None
        self.stats = FetchStats()  # reads no reader claimed (the lane index, footers)

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"RemoteFile({self.uri!r})"

    @property
    def name(self) -> str:
        return self.rel.rsplit("/", 1)[-1]

    # -- parts ----------------------------------------------------------------------------
    def read(self, offset: int, length: int, stats: FetchStats | None = None) -> bytes:
        """Bytes [offset, offset + length) of the file, assembled from whole verified parts."""
        end = min(offset + length, self.size)
        out = bytearray()
        i = max(0, bisect.bisect_right(self._starts, offset) - 1)
        while offset < end and i < len(self.parts):
            part = self.parts[i]
            data = self._part(part, stats or self.stats)
            lo = offset - part["offset"]
            take = data[lo : lo + (end - offset)]
            out += take
            offset += len(take)
            i += 1
        return bytes(out)

    def prefetch(self, row_group: int, columns, stats: FetchStats | None = None) -> None:
        """Fetch the row group's chunks of `columns` that the tier lacks, concurrently, into the tier.

        pyarrow then reads them one by one from local disk: a row group costs one round trip to the
        store instead of one per column (the store's latency, not its bandwidth, bounds a cold read).
        Without a tier there is nowhere to put them, and pyarrow's own reads fetch them in turn.
        """
        if not self.tier.enabled:
            return
        wanted = set(columns)
        todo = [
            p
            for p in self.parts
            if p.get("row_group") == row_group
            and p["what"].split(" ", 1)[-1].split(".")[0] in wanted
            and not self.tier.has(self.file_sha, p["offset"], p["sha256"])
        ]
        if len(todo) > 1:
            self.store.map(lambda p: self._part(p, stats or self.stats), todo)

    def _part(self, part: dict, stats: FetchStats) -> bytes:
        data = self.tier.get(self.file_sha, part["offset"], part["sha256"])
        if data is not None:
            stats.add(tier=len(data))
            return data
        for _attempt in (0, 1):  # a bad transfer is fetched once more; a damaged object stays damaged
            data = self._fetch(part["offset"], part["length"])
            stats.add(remote=len(data))
            if len(data) == part["length"] and hashlib.sha256(data).hexdigest() == part["sha256"]:
                self.tier.put(self.file_sha, part["offset"], part["sha256"], data)
                return data
        what = part.get("what", f"bytes {part['offset']}..{part['offset'] + part['length']}")
        raise DataError(
            f"{what}: the object's bytes differ from the published manifest's checksum (damaged or replaced object)",
            path=self.uri,
            row_group=part.get("row_group"),
            fix=REPUBLISH,
        )

    def _fetch(self, offset: int, length: int) -> bytes:
        with self._lock:
            if self._handle is None:
                handle, size = self.store.open(self.rel)
                self._check_size(size)
                self._handle = handle
        try:
            data = self.store.read_range(self.rel, self._handle, offset, length)
        except DataError:
            # a range past the end of an object replaced since it was opened fails at the store: say
            # what happened rather than what the store said about the range
            self._check_size(self.store.size(self.rel))
            raise
        if len(data) != length:
            self._check_size(self.store.size(self.rel))
        return data

    def _check_size(self, size: int | None) -> None:
        if size is None:
            raise DataError(
                "the object is gone from the store (deleted or withdrawn since it was published)",
                path=self.uri,
                fix=REPUBLISH,
            )
        if size != self.size:
            raise DataError(
                f"object is {size} bytes, its published manifest says {self.size} (truncated or "
                "replaced by another object since it was published)",
                path=self.uri,
                fix=REPUBLISH,
            )

    # -- pyarrow ----------------------------------------------------------------------------
    def metadata(self, stats: FetchStats | None = None) -> pq.FileMetaData:
        """The footer, parsed once (from its verified part)."""
        with self._lock:
            md = self._metadata
        if md is None:
            footer = self.parts[-1]
            tail = self.read(footer["offset"], footer["length"], stats)
            try:  # a footer alone, behind the 4-byte magic, reads as a file's metadata
                md = pq.read_metadata(pa.BufferReader(b"PAR1" + tail))
            except (pa.ArrowException, OSError) as exc:
                raise DataError(f"footer cannot be parsed ({exc})", path=self.uri, fix=REPUBLISH) from None
            with self._lock:
                self._metadata = md
        return md

    def parquet(self, stats: FetchStats | None = None) -> pq.ParquetFile:
        """A ParquetFile whose reads are this file's parts (one per reader and thread, as for local files)."""
        stats = stats or self.stats
        # pre_buffer off: pyarrow would coalesce nearby column chunks into one read (a good trade for one
        # big GET), and every part it touched would be fetched; each chunk asked for is one part here
        return pq.ParquetFile(
            pa.PythonFile(_RangeReader(self, stats), mode="r"), metadata=self.metadata(stats), pre_buffer=False
        )

    def close(self) -> None:
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            self.store.close(self.rel, handle)


class _RangeReader(io.RawIOBase):
    """The file-like pyarrow reads through: seek/read mapped to ``RemoteFile.read``."""

    def __init__(self, remote: RemoteFile, stats: FetchStats) -> None:
        self.remote, self.stats, self.pos = remote, stats, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.remote.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.remote.size - self.pos if n is None or n < 0 else n
        data = self.remote.read(self.pos, n, self.stats)
        self.pos += len(data)
        return data

    def readinto(self, buf) -> int:
        data = self.read(len(buf))
        buf[: len(data)] = data
        return len(data)


# -- one way to open a day file, local or remote --------------------------------------------
def as_file(f):
    """A day file as readers keep it: a RemoteFile as it is, anything else as a Path."""
    return f if isinstance(f, RemoteFile) else Path(f)


def parquet_file(f, stats: FetchStats | None = None) -> pq.ParquetFile:
    return f.parquet(stats) if isinstance(f, RemoteFile) else pq.ParquetFile(f)


def read_metadata(f, stats: FetchStats | None = None) -> pq.FileMetaData:
    return f.metadata(stats) if isinstance(f, RemoteFile) else pq.read_metadata(f)
