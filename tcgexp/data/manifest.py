"""Day manifests (``<date>.manifest.json``) and checks of a day file against one."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DataError
from .schema import SCHEMA_VERSION, arrow_schema, to_numpy
from .shards import validate_columns  # shares the per-row rules with the builder

WOULD_KO = ("eligible", "computed", "valid_trials", "failed_trials", "valid_rows", "valid_zero_rows", "failed_rows")
REFIX = "delete the day's .parquet and .manifest.json to rebuild it from its replay ZIP"


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def summed_stats(dones: list[dict]) -> dict[str, int]:
    """The day's counters: every shard's ``.done`` stats, summed."""
    stats: dict[str, int] = {}
    for d in dones:
        for k, v in d["stats"].items():
            stats[k] = stats.get(k, 0) + v
    return stats


def finish_day(
    tmp: Path,
    final: Path,
    *,
    head: dict,
    counts: dict,
    groups: list[dict],
    rows: dict[str, int],
    split: dict,
    stats: dict[str, int],
) -> dict:
    """The manifest of the day file just written to `tmp` (every day source's one manifest form), then `tmp`
    renamed to `final`. `head`: date, source, fingerprint, config; `counts`: episodes (and the source's other
    counts) after ``rows``; `split`: by, val_fraction, then train_episodes and val_episodes after the rows."""
    by = {k: split[k] for k in ("by", "val_fraction")}
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "date": head["date"],
        "file": final.name,
        "source": head["source"],
        "fingerprint": head["fingerprint"],
        "config": head["config"],
        "rows": rows["train"] + rows["val"],
        **counts,
        "row_groups": groups,
        "split": {
            **by,
            "train_rows": rows["train"],
            "val_rows": rows["val"],
            **{k: v for k, v in split.items() if k not in by},
        },
        "would_ko": {k: stats.get(k, 0) for k in WOULD_KO},
        "file_bytes": tmp.stat().st_size,
        "sha256": file_sha256(tmp),
        "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    tmp.replace(final)
    return manifest


def read_manifest(path: Path) -> dict:
    try:
        manifest = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"manifest is unreadable ({exc})", path=path, fix=REFIX) from exc
    for key in ("schema_version", "fingerprint", "rows", "row_groups", "file_bytes", "sha256"):
        if key not in manifest:
            raise DataError(f"manifest lacks {key!r}", path=path, fix=REFIX)
    return manifest


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def open_parquet(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"Parquet file is unreadable ({exc})", path=path, fix=REFIX) from exc


def check_day(parquet: Path, manifest: dict, *, feature_dim: int, action_dim: int, full: bool) -> None:
    """Raise DataError where the day file disagrees with its manifest or schema.

    quick: metadata only (size, schema, row counts per row group).
    full: also the checksum and every row group's content (lanes, episodes, values).
    """

    if manifest["schema_version"] != SCHEMA_VERSION:
        raise DataError(
            f"manifest has schema_version {manifest['schema_version']}, this code reads {SCHEMA_VERSION}",
            path=parquet,
            fix=REFIX,
        )
    size = parquet.stat().st_size
    if size != manifest["file_bytes"]:
        raise DataError(
            f"file is {size} bytes, its manifest says {manifest['file_bytes']} (truncated or replaced?)",
            path=parquet,
            fix=REFIX,
        )
    pf = open_parquet(parquet)
    expected = arrow_schema(feature_dim, action_dim)
    got = pf.schema_arrow
    for field in expected:
        if field.name not in got.names or got.field(field.name).type != field.type:
            have = got.field(field.name).type if field.name in got.names else "missing"
            raise DataError(f"column {field.name!r} is {have}, expected {field.type}", path=parquet, fix=REFIX)
    md = pf.metadata
    if md.num_rows != manifest["rows"] or md.num_row_groups != len(manifest["row_groups"]):
        raise DataError(
            f"file has {md.num_rows} rows in {md.num_row_groups} row groups, manifest says "
            f"{manifest['rows']} in {len(manifest['row_groups'])}",
            path=parquet,
            fix=REFIX,
        )
    for rg in manifest["row_groups"]:
        n = md.row_group(rg["index"]).num_rows
        if n != rg["rows"]:
            raise DataError(f"has {n} rows, manifest says {rg['rows']}", path=parquet, row_group=rg["index"], fix=REFIX)
    if not full:
        return
    if file_sha256(parquet) != manifest["sha256"]:
        raise DataError("content checksum differs from the manifest", path=parquet, fix=REFIX)
    seen: set[int] = set()
    for rg in manifest["row_groups"]:
        try:
            cols = to_numpy(pf.read_row_group(rg["index"]))
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"cannot be decoded ({exc})", path=parquet, row_group=rg["index"], fix=REFIX) from exc
        validate_columns(cols, path=parquet, row_group=rg["index"])
        eps = np.unique(cols["episode_id"])
        if len(eps) != rg["episodes"] or seen.intersection(eps.tolist()):
            raise DataError(
                "episodes are not whole inside the row group (an episode spans row groups)",
                path=parquet,
                row_group=rg["index"],
                fix=REFIX,
            )
        seen.update(eps.tolist())
