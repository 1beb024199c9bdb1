"""The reference planner's lane index, as it was before issue 14: one Python object per lane
(``reference_planner.py`` plans over it; a test fixture, outside the package)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow.parquet as pq

from tcgexp.data.errors import DataError
from tcgexp.data.lanecheck import check_lanes, lane_order

Key = tuple[int, int]  # (file index, row-group index): the cache's unit


@dataclass(frozen=True)
class RowGroupRef:
    key: Key
    rows: int
    split: str  # "train" | "val"
    row_offset: int  # global id of the row group's first row (files concatenated)


@dataclass(frozen=True)
class Lane:
    index: int  # position in LaneIndex.lanes: the lane's global id
    episode_id: int
    side: int
    key: Key
    rows: np.ndarray  # int32 local row indices in the row group, decision order
    dec_bounds: np.ndarray  # int32, len = decisions + 1: decision d is rows[dec_bounds[d]:dec_bounds[d+1]]
    step_ids: np.ndarray  # int32 step_id of each decision (0..n-1 after validation)

    @property
    def decisions(self) -> int:
        return len(self.dec_bounds) - 1

    def decision_rows(self) -> np.ndarray:
        return np.diff(self.dec_bounds)


class LaneIndex:
    """All lanes of `files`, with each row group's split taken from the day manifests."""

    COLUMNS: ClassVar[list[str]] = ["episode_id", "side", "step_id", "decision_id"]

    def __init__(self, files: Sequence[Path], manifests: Sequence[dict]) -> None:
        self.files = [Path(f) for f in files]
        self.row_groups: list[RowGroupRef] = []
        self.lanes: list[Lane] = []
        offset = 0
        for fi, (path, manifest) in enumerate(zip(self.files, manifests)):
            pf = pq.ParquetFile(path)
            for rg in manifest["row_groups"]:
                key = (fi, rg["index"])
                cols = pf.read_row_group(rg["index"], columns=self.COLUMNS)
                ep, side, step, dec = (cols.column(c).to_numpy() for c in self.COLUMNS)
                check_lanes(ep, side, step, dec, path=path, row_group=rg["index"])
                self.row_groups.append(RowGroupRef(key, len(ep), rg["split"], offset))
                self._add_lanes(key, ep, side, step)
                offset += len(ep)
        self.rows = offset
        self._rg = {r.key: r for r in self.row_groups}

    def _add_lanes(self, key: Key, ep: np.ndarray, side: np.ndarray, step: np.ndarray) -> None:
        order = lane_order(ep, side).astype(np.int32)
        e, s = ep[order], side[order]
        cut = np.flatnonzero((e[1:] != e[:-1]) | (s[1:] != s[:-1])) + 1
        for rows in np.split(order, cut):
            st = step[rows]
            starts = np.flatnonzero(np.diff(st, prepend=-1))  # a new decision where step_id changes
            self.lanes.append(
                Lane(
                    index=len(self.lanes),
                    episode_id=int(ep[rows[0]]),
                    side=int(side[rows[0]]),
                    key=key,
                    rows=rows,
                    dec_bounds=np.append(starts, len(rows)).astype(np.int32),
                    step_ids=st[starts].astype(np.int32),
                )
            )

    def row_group(self, key: Key) -> RowGroupRef:
        return self._rg[key]

    def split_lanes(self, split: str) -> list[Lane]:
        return [lane for lane in self.lanes if self._rg[lane.key].split == split]

    def split_rows(self, split: str) -> int:
        return sum(r.rows for r in self.row_groups if r.split == split)

    def largest_decision(self) -> tuple[int, Lane, int]:
        """(rows, lane, decision) of the largest decision: the smallest possible row budget."""
        best = (0, self.lanes[0], 0) if self.lanes else (0, None, 0)
        for lane in self.lanes:
            sizes = lane.decision_rows()
            d = int(np.argmax(sizes))
            if sizes[d] > best[0]:
                best = (int(sizes[d]), lane, d)
        return best


def decision_too_large(lane: Lane, d: int, budget: int, path: Path) -> DataError:
    return DataError(
        f"decision at step_id {int(lane.step_ids[d])} has {int(lane.decision_rows()[d])} rows, more than the "
        f"row budget tbptt.batch_size={budget}; a decision is never split",
        path=path,
        row_group=lane.key[1],
        lane=(lane.episode_id, lane.side),
        fix=f"set tbptt.batch_size>={int(lane.decision_rows()[d])}",
    )
