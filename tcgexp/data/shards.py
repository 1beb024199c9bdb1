"""Build shards: one ZIP member encoded into one Parquet file, ``.done`` last.

A shard counts as built only when its ``.done`` marker exists and parses; the
marker is written after the Parquet file is renamed into place, so a build
killed at any instant leaves either a finished shard or one that is redone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DataError
from .lanecheck import check_lanes
from .replay import DayZip
from .schema import to_table


def shard_paths(work: Path, index: int) -> tuple[Path, Path]:
    return work / f"shard_{index:05d}.parquet", work / f"shard_{index:05d}.done"


def read_done(work: Path, index: int) -> dict | None:
    """The shard's marker, or None when the shard must be (re)built."""
    data_path, done_path = shard_paths(work, index)
    if not (done_path.exists() and data_path.exists()):
        return None
    try:
        done = json.loads(done_path.read_text())
    except (json.JSONDecodeError, OSError):
        return None
    if done.get("bytes") != data_path.stat().st_size:
        return None
    return done


def encode_member(game, zip_path: str, member: str, would_ko: bool) -> tuple[dict, dict, list[list[int]]]:
    """Re-simulate and encode every record of one member with `game`, a SimulatedGame (runs in a worker)."""
    parts, episodes = [], []
    stats: dict[str, int] = {}
    with DayZip(Path(zip_path), verify=False) as day:
        for rec in day.iter_records(member):
            try:
                cols, st = game.encode(rec, would_ko=would_ko)
            except game.refusal as exc:
                raise DataError(
                    f"{member}: {exc}", path=zip_path, fix="the replay is inconsistent with this simulator version"
                ) from exc
            parts.append(cols)
            episodes.append([int(rec["episode_id"]), len(cols["label"])])
            for k, v in st.items():
                stats[k] = stats.get(k, 0) + int(v)
    columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}
    return columns, stats, episodes


def validate_columns(columns: dict, *, path, row_group: int | None = None) -> None:
    """What every encoded row must satisfy before it is accepted."""
    check_lanes(
        columns["episode_id"],
        columns["side"],
        columns["step_id"],
        columns["decision_id"],
        path=path,
        row_group=row_group,
    )
    feats = columns["features"]
    if not np.isfinite(feats).all():
        row = int(np.argwhere(~np.isfinite(feats))[0][0])
        raise DataError(f"features of row {row} are not finite", path=path, row_group=row_group)
    labels, mask = columns["label"], columns["action_mask"]
    if ((labels < 0) | (labels >= mask.shape[1])).any():
        row = int(np.flatnonzero((labels < 0) | (labels >= mask.shape[1]))[0])
        raise DataError(
            f"label {int(labels[row])} of row {row} is outside the action space", path=path, row_group=row_group
        )
    legal = mask[np.arange(len(labels)), labels]
    if not legal.all():
        row = int(np.flatnonzero(~legal)[0])
        raise DataError(
            f"label {int(labels[row])} of row {row} is not a legal action under its action_mask",
            path=path,
            row_group=row_group,
        )


def write_shard(
    work: Path,
    index: int,
    columns: dict,
    stats: dict,
    episodes: list,
    *,
    compression: str,
    schema: pa.Schema,
) -> dict:
    """`schema`: the game's day schema (``arrow_schema`` of its dims and columns)."""
    data_path, done_path = shard_paths(work, index)
    if columns:
        validate_columns(columns, path=data_path)
    table = to_table(columns, schema) if columns else schema.empty_table()
    tmp = data_path.with_name(data_path.name + ".tmp")
    # no dictionaries: a shard is read once, by the day's merge, and its feature columns are floats a dictionary
    # does not shrink (building one halved the shard's write speed; the day file keeps pyarrow's defaults)
    pq.write_table(table, tmp, compression=compression, use_dictionary=False)
    os.replace(tmp, data_path)
    done = {
        "index": index,
        "rows": table.num_rows,
        "bytes": data_path.stat().st_size,
        "episodes": episodes,
        "stats": stats,
    }
    tmp_done = done_path.with_name(done_path.name + ".tmp")
    tmp_done.write_text(json.dumps(done))
    os.replace(tmp_done, done_path)  # the marker goes last: it is the shard's commit
    return done


def read_shard(work: Path, index: int) -> pa.Table:
    return pq.read_table(shard_paths(work, index)[0])


def discard_partial(work: Path, index: int) -> None:
    for p in shard_paths(work, index):
        for q in (p, p.with_name(p.name + ".tmp")):
            q.unlink(missing_ok=True)
