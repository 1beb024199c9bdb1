"""``data/catalog.sqlite``: table ``datasets``, one row per built day.

The catalog is an index over the manifests; a row that disagrees with its
manifest is reported, never silently rewritten.

It is derived data, so every access goes through one guard (``_run``): a
damaged database (a corrupt page, not a database at all) is moved aside and
re-indexed from the day manifests, once, with one line on stderr; a catalog
another process holds locked is waited for a few seconds, then refused naming
that process (never with advice to delete a database in use). A row whose
Parquet file or manifest is gone is reported and left out of what callers see.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from ..overrides import shell_override
from .errors import DataError
from .manifest import read_manifest

COLUMNS = (
    "date",
    "path",
    "manifest",
    "rows",
    "row_groups",
    "episodes",
    "train_rows",
    "val_rows",
    "fingerprint",
    "schema_version",
    "sha256",
    "built_at",
)
DDL = """CREATE TABLE IF NOT EXISTS datasets (
    date TEXT PRIMARY KEY, path TEXT NOT NULL, manifest TEXT NOT NULL,
    rows INTEGER NOT NULL, row_groups INTEGER NOT NULL, episodes INTEGER NOT NULL,
    train_rows INTEGER NOT NULL, val_rows INTEGER NOT NULL,
    fingerprint TEXT NOT NULL, schema_version INTEGER NOT NULL, sha256 TEXT NOT NULL, built_at TEXT NOT NULL)"""
LOCK_WAIT_S = 5.0  # a catalog write takes milliseconds: a lock held longer is another process's open transaction


def report(line: str) -> None:
    print(f"[data] {line}", file=sys.stderr, flush=True)


class Catalog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.root = self.path.parent  # rows' paths are relative to the corpus root, where the catalog lives
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._run(lambda con: con.execute(DDL), write=True)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=LOCK_WAIT_S)

    def _run(self, fn: Callable[[sqlite3.Connection], object], *, write: bool = False):
        """`fn(connection)`, guarded: locked -> bounded wait then one line; damaged -> re-indexed once, retried."""
        for attempt in (0, 1):
            try:
                with closing(self._connect()) as con:
                    if not write:
                        return fn(con)
                    with con:  # one transaction, committed or rolled back
                        return fn(con)
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    holders = lock_holders(self.path)
                    who = f" by {'; '.join(holders)}" if holders else " by another process"
                    raise DataError(
                        f"catalog is locked{who} (waited {LOCK_WAIT_S:.0f} s)",
                        path=self.path,
                        fix="let that process finish (or stop it) and run again; the catalog is shared, keep it",
                    ) from None
                if attempt or "malformed" not in str(exc):
                    raise DataError(
                        f"catalog cannot be read ({exc})",
                        path=self.path,
                        fix=f"check the disk; python -m tcgexp.data {shell_override('dataset.root', str(self.root))} "
                        "re-indexes it from the day manifests",
                    ) from None
                self.rebuild(exc)
            except sqlite3.DatabaseError as exc:  # SQLITE_CORRUPT, SQLITE_NOTADB: the file itself is damaged
                if attempt:
                    raise DataError(
                        f"catalog is unreadable even after re-indexing ({exc})",
                        path=self.path,
                        fix=f"check the disk and the manifests under {self.root / 'bc_data'}",
                    ) from None
                self.rebuild(exc)

    def rebuild(self, why: Exception) -> int:
        """Move the damaged database aside (kept for inspection) and index every readable day manifest."""

        aside = self.path.with_name(self.path.name + ".damaged")
        for suffix in ("", "-journal", "-wal", "-shm"):  # a hot journal belongs to the damaged file
            src = Path(f"{self.path}{suffix}")
            if src.exists():
                os.replace(src, Path(f"{aside}{suffix}"))
        rows, skipped = [], []
        for manifest_path in sorted((self.root / "bc_data").glob("*.manifest.json")):
            try:
                manifest = read_manifest(manifest_path)
                rows.append(
                    self.row_from(
                        manifest,
                        manifest_path.parent.relative_to(self.root) / manifest["file"],
                        manifest_path.relative_to(self.root),
                    )
                )
            except (DataError, KeyError, TypeError):
                skipped.append(manifest_path.name)  # the build reports it by name when it validates the day
        with closing(self._connect()) as con, con:
            con.execute(DDL)
            con.executemany(
                f"INSERT OR REPLACE INTO datasets ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                [tuple(r[c] for c in COLUMNS) for r in rows],
            )
        report(
            f"{self.path} was damaged ({why}); moved to {aside.name} and re-indexed from {len(rows)} day "
            "manifests" + (f" (unreadable, left out: {', '.join(skipped)})" if skipped else "")
        )
        return len(rows)

    @staticmethod
    def row_from(manifest: dict, parquet: Path, manifest_path: Path) -> dict:
        return {
            "date": manifest["date"],
            "path": str(parquet),
            "manifest": str(manifest_path),
            "rows": manifest["rows"],
            "row_groups": len(manifest["row_groups"]),
            "episodes": manifest["episodes"],
            "train_rows": manifest["split"]["train_rows"],
            "val_rows": manifest["split"]["val_rows"],
            "fingerprint": manifest["fingerprint"],
            "schema_version": manifest["schema_version"],
            "sha256": manifest["sha256"],
            "built_at": manifest["built_at"],
        }

    def get(self, date: str) -> dict | None:
        row = self._run(
            lambda con: con.execute(f"SELECT {', '.join(COLUMNS)} FROM datasets WHERE date = ?", (date,)).fetchone()
        )
        return dict(zip(COLUMNS, row)) if row else None

    def all(self) -> list[dict]:
        """Every row whose files exist, in date order; a row pointing at a missing file is reported, left out."""
        rows = self._run(lambda con: con.execute(f"SELECT {', '.join(COLUMNS)} FROM datasets ORDER BY date").fetchall())
        out = []
        for r in (dict(zip(COLUMNS, r)) for r in rows):
            gone = [r[k] for k in ("path", "manifest") if not (self.root / r[k]).exists()]
            if gone:
                report(
                    f"{self.path}: the row for {r['date']} points at {' and '.join(gone)}, which is missing; left "
                    f"out (python -m tcgexp.data with that day builds it again from its replay ZIP)"
                )
                continue
            out.append(r)
        return out

    def put(self, row: dict) -> None:
        self._run(
            lambda con: con.execute(
                f"INSERT OR REPLACE INTO datasets ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                tuple(row[c] for c in COLUMNS),
            ),
            write=True,
        )

    def delete(self, date: str) -> None:
        self._run(lambda con: con.execute("DELETE FROM datasets WHERE date = ?", (date,)), write=True)

    def reconcile(self, manifest: dict, parquet: Path, manifest_path: Path) -> None:
        """Index a day; refuse when an existing row disagrees with the manifest. A row of the same content that
        points at other files (moved, or edited) is pointed at the day's own: ``all`` leaves a row whose files
        are missing out, and the data command that validated the day must also make it usable again."""
        want = self.row_from(manifest, parquet, manifest_path)
        have = self.get(manifest["date"])
        if have is None:
            self.put(want)
            return
        for key in ("rows", "row_groups", "episodes", "fingerprint", "sha256"):
            if have[key] != want[key]:
                raise DataError(
                    f"row for {manifest['date']} has {key}={have[key]!r}, its manifest says {want[key]!r}",
                    path=self.path,
                    fix="delete the catalog to re-index it from the manifests",
                )
        if (have["path"], have["manifest"]) != (want["path"], want["manifest"]):
            self.put(want)
            report(
                f"{self.path}: the row for {manifest['date']} pointed at {have['path']}; it points at "
                f"{want['path']} (the day's own files, checked) again"
            )


def lock_holders(path: Path) -> list[str]:
    """Processes holding POSIX locks on `path` (SQLite's locks), from /proc/locks: 'pid N (command)'."""
    try:
        st = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in lines:
        parts = line.split()
        if "->" in parts:  # a waiter, not a holder
            continue
        if len(parts) >= 6 and parts[1] == "POSIX" and parts[5] == dev and parts[4].isdigit():
            pid = int(parts[4])
            if pid != os.getpid() and pid not in pids:
                pids.append(pid)
    out = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = ""
        out.append(f"pid {pid}" + (f" ({cmd[:120]})" if cmd else ""))
    return out
