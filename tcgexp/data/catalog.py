"""``data/catalog.sqlite``: table ``datasets``, one row per built day.

The catalog is an index over the manifests; a row that disagrees with its
manifest is reported, never silently rewritten.
"""
from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Optional

from .errors import DataError

COLUMNS = ("date", "path", "manifest", "rows", "row_groups", "episodes", "train_rows", "val_rows",
           "fingerprint", "schema_version", "sha256", "built_at")
DDL = """CREATE TABLE IF NOT EXISTS datasets (
    date TEXT PRIMARY KEY, path TEXT NOT NULL, manifest TEXT NOT NULL,
    rows INTEGER NOT NULL, row_groups INTEGER NOT NULL, episodes INTEGER NOT NULL,
    train_rows INTEGER NOT NULL, val_rows INTEGER NOT NULL,
    fingerprint TEXT NOT NULL, schema_version INTEGER NOT NULL, sha256 TEXT NOT NULL, built_at TEXT NOT NULL)"""


class Catalog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with closing(self._connect()) as con, con:
                con.execute(DDL)
        except sqlite3.DatabaseError as exc:
            raise DataError(f"catalog is unreadable ({exc})", path=self.path,
                            fix="delete it; it is re-indexed from the day manifests") from exc

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    @staticmethod
    def row_from(manifest: dict, parquet: Path, manifest_path: Path) -> dict:
        return {
            "date": manifest["date"], "path": str(parquet), "manifest": str(manifest_path),
            "rows": manifest["rows"], "row_groups": len(manifest["row_groups"]),
            "episodes": manifest["episodes"], "train_rows": manifest["split"]["train_rows"],
            "val_rows": manifest["split"]["val_rows"], "fingerprint": manifest["fingerprint"],
            "schema_version": manifest["schema_version"], "sha256": manifest["sha256"],
            "built_at": manifest["built_at"],
        }

    def get(self, date: str) -> Optional[dict]:
        with closing(self._connect()) as con:
            cur = con.execute(f"SELECT {', '.join(COLUMNS)} FROM datasets WHERE date = ?", (date,))
            row = cur.fetchone()
        return dict(zip(COLUMNS, row)) if row else None

    def all(self) -> list[dict]:
        with closing(self._connect()) as con:
            rows = con.execute(f"SELECT {', '.join(COLUMNS)} FROM datasets ORDER BY date").fetchall()
        return [dict(zip(COLUMNS, r)) for r in rows]

    def put(self, row: dict) -> None:
        with closing(self._connect()) as con, con:
            con.execute(f"INSERT OR REPLACE INTO datasets ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                        tuple(row[c] for c in COLUMNS))

    def delete(self, date: str) -> None:
        with closing(self._connect()) as con, con:
            con.execute("DELETE FROM datasets WHERE date = ?", (date,))

    def reconcile(self, manifest: dict, parquet: Path, manifest_path: Path) -> None:
        """Index a day; refuse when an existing row disagrees with the manifest."""
        want = self.row_from(manifest, parquet, manifest_path)
        have = self.get(manifest["date"])
        if have is None:
            self.put(want)
            return
        for key in ("rows", "row_groups", "episodes", "fingerprint", "sha256"):
            if have[key] != want[key]:
                raise DataError(f"row for {manifest['date']} has {key}={have[key]!r}, its manifest says {want[key]!r}",
                                path=self.path, fix="delete the catalog to re-index it from the manifests")
