"""The ZIP store of an episode game's days: ``replays/<date>/<import stamp>.zip``, each written once, never again.

A ZIP holds the episodes one import filed into that day (their bytes as given, their sidecars) and
``index.json``: each episode's id, match number, source file, players and engine version. ``ZipStore`` lists a
root's days and ZIPs and what they hold; ``NewZip`` writes one, to a temporary name renamed whole.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import threading
import zipfile
import zlib
from pathlib import Path

from .errors import DataError

INDEX = "index.json"
COMPRESSLEVEL = 1  # the durable copy is deflated fast: the import is bounded by parsing, not by zlib


class NewZip:
    """One import's new ZIP for one day: written member by member (deflate in a helper thread), renamed whole."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp = path.with_name(path.name + ".tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.zf = zipfile.ZipFile(self.tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESSLEVEL)
        self.entries: list[dict] = []
        self._pending: threading.Thread | None = None

    def add(self, raw: bytes, sidecar: bytes | None, entry: dict) -> None:
        k = len(self.entries)
        member = f"e{k:06d}.json"
        entry = {**entry, "member": member}
        if sidecar is not None:
            entry["sidecar"] = f"e{k:06d}_info.json"
        self.wait()

        def write() -> None:  # zlib lets go of the GIL: the next episode parses meanwhile
            self.zf.writestr(member, raw)
            if sidecar is not None:
                self.zf.writestr(entry["sidecar"], sidecar)

        self._pending = threading.Thread(target=write, daemon=True)
        self._pending.start()
        self.entries.append(entry)

    def wait(self) -> None:
        if self._pending is not None:
            self._pending.join()
            self._pending = None

    def commit(self, meta: dict) -> None:
        self.wait()
        self.zf.writestr(INDEX, json.dumps({**meta, "episodes": self.entries}, indent=1, sort_keys=True))
        self.zf.close()
        with open(self.tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(self.tmp, self.path)  # written once: from here on it is the day's durable source

    def abandon(self) -> None:
        self.wait()
        self.zf.close()
        self.tmp.unlink(missing_ok=True)


def is_day(name: str) -> bool:
    try:
        return dt.date.fromisoformat(name).isoformat() == name
    except ValueError:
        return False


def read_index(path: Path) -> dict:
    try:
        with zipfile.ZipFile(path) as zf:
            return json.loads(zf.read(INDEX))
    except (zipfile.BadZipFile, KeyError, OSError, ValueError, zlib.error) as exc:
        raise DataError(
            f"replay ZIP has no readable {INDEX} ({exc})", path=path, fix="restore it from a backup or move it away"
        ) from exc


class ZipStore:
    """The replay ZIPs under ``root/replays``: one folder per day."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def day_zips(self, date: str) -> list[Path]:
        folder = self.root / "replays" / date
        return sorted(folder.glob("*.zip")) if folder.is_dir() else []

    def days(self) -> list[str]:
        """The days that hold ZIPs; a folder of ZIPs that is not a day (an earlier version filed ``date=yesterday``
        as it was given) is named, with what to do, rather than read as one."""
        folder = self.root / "replays"
        if not folder.is_dir():
            return []
        out = []
        for p in sorted(folder.iterdir()):
            if not p.is_dir() or p.name.startswith(".") or not any(p.glob("*.zip")):
                continue
            if not is_day(p.name):
                raise DataError(
                    f"replays/{p.name}/ holds replay ZIPs but is not a day (YYYY-MM-DD): an earlier import filed "
                    f"its episodes under date={p.name}",
                    path=p,
                    fix=f"rename it to the day its episodes were played (mv {p} {folder}/YYYY-MM-DD), or delete it "
                    "and import those episodes again with date=YYYY-MM-DD",
                )
            out.append(p.name)
        return out

    def discard_partial(self) -> list[Path]:
        """ZIPs a stopped import left half-written (``<stamp>.zip.tmp``): never committed, so they hold nothing
        filed; removed (under the build lock, so no live import is writing them)."""
        left = sorted((self.root / "replays").glob("*/*.zip.tmp")) if (self.root / "replays").is_dir() else []
        for p in left:
            p.unlink(missing_ok=True)
        return left

    def prune(self, date: str) -> None:
        """The day's folders, where they are empty (an import that filed nothing into them made them)."""
        for p in (self.root / "replays" / date, self.root / "replays"):
            with contextlib.suppress(OSError):
                p.rmdir()

    def known(self) -> tuple[set[str], int]:
        """(every imported episode id, the next match number), from every ZIP's index."""
        seen: set[str] = set()
        nxt = 0
        for day in self.days():
            for z in self.day_zips(day):
                for e in read_index(z)["episodes"]:
                    seen.add(str(e["id"]))
                    nxt = max(nxt, int(e["match"]) + 1)
        return seen, nxt

    def versions(self, date: str) -> set[int]:
        return {int(e.get("version", 2)) for z in self.day_zips(date) for e in read_index(z)["episodes"]}

    def new_zip(self, date: str, stamp: str) -> NewZip:
        return NewZip(self.root / "replays" / date / f"{stamp}.zip")
