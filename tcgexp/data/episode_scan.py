"""Finding episode files: a folder (recursively) or a ZIP of episode JSONs, each with its metadata sidecar.

``scan`` yields them in name order, each read only when asked (``Incoming.read``); a sidecar is the file's
``<stem>_info.json`` or ``<stem>.info.json`` (Kaggle's episode metadata). ZIPs inside the source (a ``.zip``
member of the source ZIP, a ``.zip`` file anywhere in the source folder) are scanned too, ``MAX_ZIP_DEPTH`` deep,
their episodes named ``outer.zip:inner.zip:member.json``. ``loads`` parses JSON with orjson where it is installed;
``no_gc`` holds the cyclic collector off while episodes stream through.

Every read is bounded, whatever the input: a file or member larger than ``MAX_MEMBER`` (by ``stat`` or by its ZIP
header), or a member whose header says it inflates more than ``MAX_RATIO`` times, is refused before a byte of it
is read; a member whose header lies is read in chunks and stopped at ``MAX_MEMBER`` + 1 bytes. A refusal is a
``ScanRefused`` raised by ``Incoming.read`` (or ``sidecar``): one line in the import's summary, naming the file,
and the episodes beside it are filed.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import DataError

SIDECARS = ("_info.json", ".info.json")

MiB = 1 << 20
# Bounds on what one read may hold in memory. Measured on the real game's episodes (one demo day of 24 self-play
# episodes, ``python -m tcgexp.data dataset=cabt_demo dataset.demo.episodes_per_day=24``, its replay ZIP's
# infolist): an episode JSON is 0.17-2.2 MB (median 0.7 MB), a sidecar under 300 bytes; deflated they shrink
# 12-14x in tcgexp's own ZIPs (level 1), up to 43x at level 9 and 45x pretty-printed (indent=2). Zeros deflate
# ~1,030x, so a bomb is refused by its header, while a real episode has >100x room under either bound.
MAX_MEMBER = 256 * MiB  # bytes one episode file, sidecar or nested ZIP may hold: over 100x the largest measured
MAX_RATIO = 200  # file_size / compress_size a member may claim: over 4x the highest measured (45x)
RATIO_FLOOR = MiB  # members this small are never refused by ratio: inflating a MiB harms nothing
MAX_ZIP_DEPTH = 2  # ZIP layers: the source ZIP (or a ZIP in the source folder) and one ZIP inside it
CHUNK = MiB  # a member is inflated this much at a time, so a lying header costs at most MAX_MEMBER + CHUNK


class ScanRefused(DataError):
    """An episode file (or ZIP member, or ZIP) the scan will not read: too large, a likely ZIP bomb, nested too
    deep, encrypted, or damaged. The message leaves out the name (the import's summary prefixes it)."""


def loads(raw: bytes):
    try:
        import orjson  # a game's extra may bring it: ~2.5x json's speed on episode JSON

        return orjson.loads(raw)
    except ImportError:
        return json.loads(raw)


def is_sidecar(name: str) -> bool:
    return name.endswith(SIDECARS)


def is_zip(name: str) -> bool:
    return name.lower().endswith(".zip")


@dataclass
class Incoming:
    name: str  # where it came from (file path or ZIP member), for messages
    read: Callable[[], bytes]
    sidecar: Callable[[], bytes] | None


NOT_AN_EPISODE = "an episode is a few MB: this is not one; leave it out of the source"
UNZIP_FIRST = "a ZIP inside the source is read into memory whole: unzip it and import the folder"


def too_large(size: int, what: str, fix: str = NOT_AN_EPISODE) -> ScanRefused:
    return ScanRefused(f"{size:,} bytes{what}, over the {MAX_MEMBER:,}-byte limit (episode_scan.MAX_MEMBER)", fix=fix)


def bounded(stream: io.RawIOBase | io.BufferedIOBase, claim: str, fix: str = NOT_AN_EPISODE) -> bytes:
    """All of `stream`, read in chunks, refused as soon as it passes ``MAX_MEMBER`` (having read ``MAX_MEMBER`` + 1
    bytes, never more); `claim` is what its header or stat said its size was, for the message."""
    parts, size = [], 0
    while chunk := stream.read(min(CHUNK, MAX_MEMBER + 1 - size)):
        parts.append(chunk)
        size += len(chunk)
        if size > MAX_MEMBER:
            raise too_large(size, f" and more when read ({claim})", fix)
    return b"".join(parts)


def read_file(p: Path) -> bytes:
    """A file of the source folder, refused by its size before it is read, and read bounded (it may grow, or be
    a device)."""
    size = p.stat().st_size
    if size > MAX_MEMBER:
        raise too_large(size, "")
    with open(p, "rb") as f:
        return bounded(f, f"stat said {size:,}")


def read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, fix: str = NOT_AN_EPISODE) -> bytes:
    """A ZIP member, refused by its header (size, ratio, method, encryption) before it is inflated, and inflated
    in chunks, bounded whatever its header says."""
    if info.file_size > MAX_MEMBER:
        raise too_large(info.file_size, " inflated (its header says)", fix)
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > RATIO_FLOOR and ratio > MAX_RATIO:
        raise ScanRefused(
            f"inflates {ratio:,.0f}x ({info.compress_size:,} bytes to {info.file_size:,}), over the {MAX_RATIO}x"
            " limit (episode_scan.MAX_RATIO): a ZIP bomb, not an episode (real ones deflate under 50x)",
            fix="leave it out of the source",
        )
    if info.flag_bits & 0x1:
        raise ScanRefused("encrypted", fix="unzip it with its password, then import the folder")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        # bzip2 and LZMA inflate a whole read at once (no bound on one call's output): refused, not risked
        raise ScanRefused(
            f"compressed with method {info.compress_type} (only stored and deflate are read)",
            fix="re-zip it with deflate (zip's default), or unzip it and import the folder",
        )
    try:
        with zf.open(info) as f:
            return bounded(f, f"its header said {info.file_size:,}", fix)
    except ScanRefused:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, RuntimeError, NotImplementedError) as exc:
        # a CRC that fails (a header that lies about the size stops zipfile at that size, then fails here)
        raise ScanRefused(f"unreadable ZIP member ({exc})", fix="the ZIP is damaged: zip the episodes again") from exc


def refused(exc: Exception) -> Callable[[], bytes]:
    def read() -> bytes:
        raise exc

    return read


def scan(source: Path) -> Iterator[Incoming]:
    """The episode files of a folder (recursively) or a ZIP, in name order, each with its sidecar if any; ZIPs
    inside either are scanned in their place in that order."""
    source = Path(source)
    if source.is_dir():
        # JSONs in the order of their Paths, as always (it numbers their matches); a ZIP among them in its place
        files = sorted(
            p
            for p in source.rglob("*")
            if (p.name.endswith(".json") and not is_sidecar(p.name)) or (is_zip(p.name) and p.is_file())
        )
        for p in files:
            if p.name.endswith(".json"):
                side = next((q for q in (p.with_name(p.stem + s) for s in SIDECARS) if q.exists()), None)
                yield Incoming(str(p), lambda p=p: read_file(p), (lambda s=side: read_file(s)) if side else None)
                continue
            try:
                zf = zipfile.ZipFile(p)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
                yield Incoming(str(p), refused(unopenable(exc)), None)
                continue
            with zf:
                yield from scan_zip(zf, str(p), 1)
        return
    if not source.exists():
        raise DataError("import source does not exist", path=source, fix="give a folder or a ZIP of episode JSONs")
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"import source is neither a folder nor a readable ZIP ({exc})", path=source) from exc
    with zf:
        yield from scan_zip(zf, str(source), 1)


def unopenable(exc: Exception) -> ScanRefused:
    return ScanRefused(f"not a readable ZIP ({exc})", fix="zip the episodes again, or unzip it and import the folder")


def scan_zip(zf: zipfile.ZipFile, where: str, depth: int) -> Iterator[Incoming]:
    """The episodes of an open ZIP (`depth` ZIPs deep), named ``<where>:<member>``; a ZIP member in its place in
    name order, read bounded into memory and scanned in turn, refused by name past ``MAX_ZIP_DEPTH``."""
    infos = {i.filename: i for i in zf.infolist()}
    for n in sorted(x for x in infos if (x.endswith(".json") and not is_sidecar(x)) or is_zip(x)):
        name = f"{where}:{n}"
        if not n.endswith(".json"):
            if depth + 1 > MAX_ZIP_DEPTH:
                err = ScanRefused(
                    f"a ZIP nested {depth + 1} deep (episode_scan.MAX_ZIP_DEPTH={MAX_ZIP_DEPTH})",
                    fix="unzip it first, and import the folder",
                )
                yield Incoming(name, refused(err), None)
                continue
            try:
                inner = zipfile.ZipFile(io.BytesIO(read_member(zf, infos[n], UNZIP_FIRST)))
            except ScanRefused as exc:
                yield Incoming(name, refused(exc), None)
                continue
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
                yield Incoming(name, refused(unopenable(exc)), None)
                continue
            with inner:
                yield from scan_zip(inner, name, depth + 1)
            continue
        stem = n[: -len(".json")]
        side = next((infos[stem + s] for s in SIDECARS if stem + s in infos), None)
        yield Incoming(
            name,
            lambda i=infos[n]: read_member(zf, i),
            (lambda s=side: read_member(zf, s)) if side else None,
        )


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic collector off while episodes stream through: an episode is a tree of a million small objects
    (no cycles; freed by reference counting as soon as it is encoded), which the collector would otherwise walk
    again and again (about a third of the import's time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
