"""The lane index: every (episode_id, side) lane of a corpus and its decisions, as flat arrays.

Built from the lane columns alone (column projection: a few bytes per row), so
the whole epoch can be planned before any feature is decoded. A lane lives in
one row group (row groups hold whole episodes); its rows are that row group's
rows of the lane in decision order, and its decisions cut them (a
multi-select decision spans several rows).

Nothing here is a Python object per lane: lanes are numbered in index order
(file, row group as the manifest lists them, then (episode_id, side)), and

- ``lane_rows`` holds every lane's local row indices back to back,
- ``lane_dec0[i]:lane_dec0[i+1]`` are lane i's decisions (global decision ids),
- ``dec_row0[d]:dec_row0[d+1]`` are decision d's positions in ``lane_rows``,

so a decision's or chunk's row count is a difference of ``dec_row0``. Lane
objects (``index.lanes[i]``) are views built on demand, for errors and tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from ..data.errors import DataError
from ..data.lanecheck import check_lanes
from ..data.remote import as_file, parquet_file
from ..data.source import Key  # (file index, row-group index)


@dataclass(frozen=True)
class RowGroupRef:
    key: Key
    rows: int
    split: str  # "train" | "val"
    row_offset: int  # global id of the row group's first row (files concatenated)


@dataclass(frozen=True)
class Lane:
    index: int  # the lane's global id
    episode_id: int
    side: int
    key: Key
    rows: np.ndarray  # int32 local row indices in the row group, decision order
    dec_bounds: np.ndarray  # int32, len = decisions + 1: decision d is rows[dec_bounds[d]:dec_bounds[d+1]]
    step_ids: np.ndarray  # int32 step_id of each decision (0..n-1: the index checks it)

    @property
    def decisions(self) -> int:
        return len(self.dec_bounds) - 1

    def decision_rows(self) -> np.ndarray:
        return np.diff(self.dec_bounds)


def group_rows(group: np.ndarray, ep: np.ndarray, side: np.ndarray) -> np.ndarray:
    """Row positions grouped by (row group, episode_id, side), row order kept inside a lane.

    The builder writes whole episodes in increasing id order, so a lane key is a small
    integer (episode run * 2 + side) and a stable radix sort on uint16 does the grouping
    in linear time; anything else falls back to the general lexsort (same result).
    """
    n = len(ep)
    if n == 0:
        return np.empty(0, np.int64)
    new = np.ones(n, bool)
    new[1:] = (group[1:] != group[:-1]) | (ep[1:] != ep[:-1])
    runs = np.flatnonzero(new)
    run_ep, run_g = ep[runs], group[runs]
    increasing = (
        bool(((run_ep[1:] > run_ep[:-1]) | (run_g[1:] != run_g[:-1])).all())
        and bool((np.diff(run_g) >= 0).all())
        and bool(((side == 0) | (side == 1)).all())
    )
    if increasing and 2 * len(runs) <= np.iinfo(np.uint16).max:
        key = ((np.cumsum(new) - 1) * 2 + side).astype(np.uint16)
        return np.argsort(key, kind="stable")
    return np.lexsort((side, ep, group))


class LaneIndex:
    """All lanes of `files`, with each row group's split taken from the day manifests."""

    COLUMNS: ClassVar[list[str]] = ["episode_id", "side", "step_id", "decision_id"]

    @classmethod
    def of(cls, corpus) -> LaneIndex:
        """The lanes of a built ``tcgexp.data.Corpus`` (its selected days, in order), through its filter."""
        return cls(corpus.files, [corpus.manifests[d] for d in corpus.dates], getattr(corpus, "filter", None))

    def __init__(self, files: Sequence[Path], manifests: Sequence[dict], filter: dict | None = None) -> None:
        self.files = [as_file(f) for f in files]  # local Paths, or RemoteFiles (only the lane columns are fetched)
        rows_filter = RowFilter.of(filter)
        parts = []
        self.pruned = 0  # row groups the filter left unread (their Parquet statistics exclude every row)
        for fi, (path, manifest) in enumerate(zip(self.files, manifests)):
            pf = parquet_file(path)
            rgs = manifest["row_groups"]
            if rows_filter is not None:
                rows_filter.check_columns(pf, path)
                kept = [rg for rg in rgs if rows_filter.may_hold(pf.metadata.row_group(rg["index"]), pf)]
                self.pruned += len(rgs) - len(kept)
                rgs = kept
            indices = [rg["index"] for rg in rgs]
            if not indices:
                continue  # every row group of the day ruled out by its statistics
            columns = self.COLUMNS + (rows_filter.COLUMNS if rows_filter is not None else [])
            table = pf.read_row_groups(indices, columns=columns, use_threads=False)
            cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in columns}
            sizes = [pf.metadata.row_group(i).num_rows for i in indices]
            if rows_filter is not None:
                cols["keep"] = rows_filter.keep(cols)
            parts.append((fi, path, rgs, sizes, cols))
        self._build(parts)
        if rows_filter is not None and not self.n_lanes:
            raise DataError(
                f"dataset.filter ({rows_filter}) selects no decision in the {len(self.files)} day(s) chosen",
                fix="lower dataset.filter.min_rating or name players the days hold (their player column)",
            )

    @classmethod
    def from_columns(cls, files: Sequence[Path], days: Sequence[tuple[list[dict], list[int], dict]]) -> LaneIndex:
        """An index from lane columns already in memory: (manifest row groups, sizes, columns) per file."""
        self = cls.__new__(cls)
        self.files = [Path(f) for f in files]
        self._build([(fi, self.files[fi], rgs, sizes, cols) for fi, (rgs, sizes, cols) in enumerate(days)])
        return self

    def _build(self, parts) -> None:
        self.row_groups: list[RowGroupRef] = []
        self.selected: dict[int, np.ndarray] = {}  # filtered: each row group's chosen local rows
        rows_parts, lane_rg, lane_ep, lane_side, lane_len, dec_len, dec_pos = [], [], [], [], [], [], []
        offset = row_base = 0
        for fi, path, rgs, sizes, cols in parts:
            ep, side, step, dec = (cols[c] for c in self.COLUMNS)
            first_g = len(self.row_groups)
            group = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
            local = np.arange(len(ep), dtype=np.int64) - np.repeat(np.cumsum([0] + sizes[:-1]), sizes)
            order = group_rows(group, ep, side)
            keep = cols.get("keep")
            if keep is not None:  # the filter's rows only: whole lanes (a lane is one agent's)
                order = order[keep[order]]
            g, e, s, st = group[order], ep[order], side[order], step[order].astype(np.int64)
            lane_start = np.ones(len(order), bool)
            lane_start[1:] = (g[1:] != g[:-1]) | (e[1:] != e[:-1]) | (s[1:] != s[:-1])
            self._check(lane_start, st, dec[order], g, path, rgs, sizes, cols)
            dec_start = lane_start | np.diff(st, prepend=-1).astype(bool)  # a new decision where step_id changes
            starts = np.flatnonzero(lane_start)
            chosen = np.bincount(group[keep], minlength=len(sizes)) if keep is not None else sizes
            for rg, n, k in zip(rgs, sizes, chosen):
                self.row_groups.append(RowGroupRef((fi, rg["index"]), int(k), rg["split"], offset))
                offset += n
            if keep is not None:
                for gi in range(len(sizes)):
                    self.selected[first_g + gi] = np.flatnonzero(keep[group == gi]).astype(np.int64)
            rows_parts.append(local[order].astype(np.int32))
            lane_rg.append(first_g + g[starts])
            lane_ep.append(e[starts].astype(np.int64))
            lane_side.append(s[starts].astype(np.int8))
            bounds = np.append(starts, len(order))
            lane_len.append(np.diff(bounds))
            dec_len.append(
                np.add.reduceat(dec_start.astype(np.int64), starts) if len(starts) else np.empty(0, np.int64)
            )
            dec_pos.append(np.flatnonzero(dec_start) + row_base)
            row_base += len(order)
        self.rows = offset
        cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.empty(0, dt)
        self.lane_rows = cat(rows_parts, np.int32)
        self.lane_rg = cat(lane_rg, np.int32)
        self.lane_episode = cat(lane_ep, np.int64)
        self.lane_side = cat(lane_side, np.int8)
        self.dec_row0 = np.append(cat(dec_pos, np.int64), len(self.lane_rows))
        self.lane_dec0 = np.concatenate([[0], np.cumsum(cat(dec_len, np.int64))]).astype(np.int64)
        self.lane_row0 = np.concatenate([[0], np.cumsum(cat(lane_len, np.int64))]).astype(np.int64)
        self.rg_offset = np.array([r.row_offset for r in self.row_groups], np.int64)
        self.rg_val = np.array([r.split == "val" for r in self.row_groups], bool)
        # take dicts are sorted by key tuple: the rank of each row group in that order
        keys = [r.key for r in self.row_groups]
        self.rg_rank = np.empty(len(keys), np.int64)
        self.rg_rank[sorted(range(len(keys)), key=keys.__getitem__)] = np.arange(len(keys))
        self._rg = {r.key: r for r in self.row_groups}

    @staticmethod
    def _check(lane_start, st, dec, g, path, rgs, sizes, cols) -> None:
        """check_lanes over the whole file at once; the failing row group is re-checked for its message."""
        step = np.diff(st, prepend=0)
        bad = (lane_start & (st != 0)) | (~lane_start & (step != 0) & (step != 1))
        bad |= ~lane_start & (step == 0) & (np.diff(dec, prepend=dec[:1]) != 0)
        if not bad.any():
            return
        gi = int(g[int(np.argmax(bad))])
        a = int(sum(sizes[:gi]))
        sl = slice(a, a + sizes[gi])
        check_lanes(
            cols["episode_id"][sl],
            cols["side"][sl],
            cols["step_id"][sl],
            cols["decision_id"][sl],
            path=path,
            row_group=rgs[gi]["index"],
        )
        raise DataError("broken lane", path=path, row_group=rgs[gi]["index"])  # check_lanes names it first

    # -- views -----------------------------------------------------------------------------
    @property
    def n_lanes(self) -> int:
        return len(self.lane_rg)

    @property
    def lanes(self) -> LaneViews:
        return LaneViews(self)

    def lane(self, i: int) -> Lane:
        i = int(i)
        r0, d0, d1 = int(self.lane_row0[i]), int(self.lane_dec0[i]), int(self.lane_dec0[i + 1])
        return Lane(
            index=i,
            episode_id=int(self.lane_episode[i]),
            side=int(self.lane_side[i]),
            key=self.row_groups[int(self.lane_rg[i])].key,
            rows=self.lane_rows[r0 : int(self.lane_row0[i + 1])],
            dec_bounds=(self.dec_row0[d0 : d1 + 1] - r0).astype(np.int32),
            step_ids=np.arange(d1 - d0, dtype=np.int32),
        )

    def row_group(self, key: Key) -> RowGroupRef:
        return self._rg[key]

    def split_lane_ids(self, split: str) -> np.ndarray:
        return np.flatnonzero(self.rg_val[self.lane_rg] == (split == "val"))

    def split_lanes(self, split: str) -> list[Lane]:
        return [self.lane(i) for i in self.split_lane_ids(split)]

    def split_rows(self, split: str) -> int:
        return sum(r.rows for r in self.row_groups if r.split == split)

    def decision_sizes(self) -> np.ndarray:
        return np.diff(self.dec_row0)

    def largest_decision(self) -> tuple[int, Lane | None, int]:
        """(rows, lane, decision) of the largest decision: the smallest possible row budget."""
        if not self.n_lanes:
            return 0, None, 0
        d = int(np.argmax(self.decision_sizes()))  # the first largest, in lane order
        lane = int(np.searchsorted(self.lane_dec0, d, side="right") - 1)
        return int(self.dec_row0[d + 1] - self.dec_row0[d]), self.lane(lane), d - int(self.lane_dec0[lane])

    def nbytes(self) -> int:
        return sum(
            a.nbytes
            for a in (
                self.lane_rows,
                self.lane_rg,
                self.lane_episode,
                self.lane_side,
                self.dec_row0,
                self.lane_dec0,
                self.lane_row0,
            )
        )


class RowFilter:
    """``dataset.filter``: rows of agents rated at least ``min_rating`` and/or named in ``players``.

    Resolved before planning: a row group whose Parquet statistics exclude every row is not even read; the
    others' ``rating`` and ``player`` columns choose whole lanes (a lane is one agent's decisions)."""

    COLUMNS: ClassVar[list[str]] = ["rating", "player"]

    def __init__(self, min_rating: float | None, players: list[str] | None) -> None:
        self.min_rating = None if min_rating is None else float(min_rating)
        self.players = None if players is None else [str(p) for p in players]

    @classmethod
    def of(cls, spec) -> RowFilter | None:
        if not spec:
            return None
        get = spec.get if hasattr(spec, "get") else lambda k, d=None: getattr(spec, k, d)
        f = cls(get("min_rating", None), get("players", None))
        return f if f.min_rating is not None or f.players is not None else None

    def __str__(self) -> str:
        parts = ([f"min_rating={self.min_rating:g}"] if self.min_rating is not None else []) + (
            [f"players={self.players}"] if self.players is not None else []
        )
        return ", ".join(parts)

    def check_columns(self, pf, path) -> None:
        names = pf.schema_arrow.names
        missing = [c for c in self.COLUMNS if c not in names]
        if missing:
            raise DataError(
                f"dataset.filter needs the columns {missing}, which this corpus's game does not write",
                path=path,
                fix="filter a corpus of the real game (dataset=cabt), or unset dataset.filter",
            )

    def may_hold(self, rg_meta, pf) -> bool:
        """False when the row group's statistics rule out every row (then it is never read)."""
        names = pf.schema_arrow.names
        if self.min_rating is not None:
            st = rg_meta.column(names.index("rating")).statistics
            if st is not None and st.has_min_max and st.max < self.min_rating:
                return False
        if self.players is not None:
            st = rg_meta.column(names.index("player")).statistics
            if st is not None and st.has_min_max and not any(st.min <= p <= st.max for p in self.players):
                return False
            if st is not None and st.has_min_max is False and st.null_count == rg_meta.num_rows:
                return False
        return True

    def keep(self, cols: dict) -> np.ndarray:
        keep = np.ones(len(cols["rating"]), bool)
        if self.min_rating is not None:
            keep &= np.nan_to_num(cols["rating"].astype(np.float64), nan=-np.inf) >= self.min_rating
        if self.players is not None:
            keep &= np.isin(np.asarray(cols["player"], dtype=object), np.asarray(self.players, dtype=object))
        return keep


class LaneViews(Sequence):
    """``index.lanes``: a sequence of Lane views, built per access."""

    def __init__(self, index: LaneIndex) -> None:
        self._index = index

    def __len__(self) -> int:
        return self._index.n_lanes

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._index.lane(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._index.lane(i)

    def __iter__(self) -> Iterator[Lane]:
        return (self._index.lane(i) for i in range(len(self)))


def decision_too_large(lane: Lane, d: int, budget: int, path: Path) -> DataError:
    return DataError(
        f"decision at step_id {int(lane.step_ids[d])} has {int(lane.decision_rows()[d])} rows, more than the "
        f"row budget tbptt.batch_size={budget}; a decision is never split",
        path=path,
        row_group=lane.key[1],
        lane=(lane.episode_id, lane.side),
        fix=f"set tbptt.batch_size>={int(lane.decision_rows()[d])}",
    )
