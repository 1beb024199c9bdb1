"""A plan: the epoch's placed chunks as flat arrays, with microbatches built from them on demand.

The planner decides which chunk goes into which microbatch; everything else
(row ids, row -> lane slot, row -> decision, the row groups each microbatch
reads) follows from the index's arrays. Doing that per microbatch, when the
loader asks for it, keeps a plan's memory proportional to its chunks (about
one per 20 rows), not its rows, and its cost off the planning path.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .lanes import Key, LaneIndex


@dataclass
class Microbatch:
    """One step's worth of rows; everything the loader and trainer need, as arrays.

    Row order: chunk by chunk, rows in decision order inside a chunk.
    """

    index: int
    keys: tuple[Key, ...]  # row groups touched, sorted: this position of the access trace
    take: dict[Key, tuple[np.ndarray, np.ndarray]]  # key -> (local rows to read, output positions)
    row_lane: np.ndarray  # int32 [R] lane slot (0..L-1) of each row
    row_dec: np.ndarray  # int32 [R] decision position inside the chunk (0..T-1)
    row_ids: np.ndarray  # int64 [R] global row id (row-order reconstruction, coverage)
    lane_ids: np.ndarray  # int64 [L] global lane id (whose memory to read and write)
    lane_fresh: np.ndarray  # bool [L] the chunk starts the lane: memory starts from zero
    lane_decisions: np.ndarray  # int32 [L] decisions in the chunk (T = max)
    lane_dec_start: np.ndarray  # int32 [L] lane-local decision index of the chunk's first decision

    @property
    def rows(self) -> int:
        return len(self.row_ids)

    @property
    def lanes(self) -> int:
        return len(self.lane_ids)


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """concatenate(arange(s, s + n) for s, n in zip(starts, lengths)), without a Python loop."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total, dtype=np.int64)


class Plan:
    """``microbatches[i]`` is chunks ``bounds[i]:bounds[i+1]`` of (lane, d0, d1) in placed order.

    d0/d1 are global decision ids (``index.lane_dec0``). ``len(plan)`` is microbatches_per_epoch.
    ``width`` is the decision width it was planned with (the planner's chunk; 1 without TBPTT): no chunk holds
    more decisions, and ``prepare`` pads a microbatch's decisions to at most it.
    """

    def __init__(
        self,
        index: LaneIndex,
        lane: np.ndarray,
        d0: np.ndarray,
        d1: np.ndarray,
        bounds: np.ndarray,
        split: str,
        epoch: int | None,
        tbptt: bool,
        *,
        width: int,
    ) -> None:
        self.index, self.lane, self.d0, self.d1 = index, lane, d0, d1
        self.width = width
        self.bounds = bounds
        self.split, self.epoch, self.tbptt = split, epoch, tbptt
        self.chunk_rows = index.dec_row0[d1] - index.dec_row0[d0]
        self.chunk_rg = index.lane_rg[lane]
        self.microbatches = Microbatches(self, 0, len(bounds) - 1)
        self._stats: dict | None = None
        self._trace: list | None = None

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __iter__(self) -> Iterator[Microbatch]:
        return iter(self.microbatches)

    def __getitem__(self, i: int) -> Microbatch:
        return self.microbatches[i]

    @property
    def rows(self) -> int:
        return int(self.chunk_rows.sum())

    def optimizer_steps(self, accum_steps: int) -> int:
        return -(-len(self) // accum_steps)  # ceil: the last partial window is applied too

    # -- per microbatch ---------------------------------------------------------------------
    def _mb_keys(self):
        """(microbatch, row-group) pairs, sorted by key inside each microbatch."""
        ix = self.index
        mb = np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.bounds))
        pairs = np.unique(mb * len(ix.row_groups) + ix.rg_rank[self.chunk_rg])
        return pairs // len(ix.row_groups), pairs % len(ix.row_groups)

    def trace(self) -> list[tuple[Key, ...]]:
        """The full future access trace: row groups touched, position by position."""
        if self._trace is None:
            ix = self.index
            by_rank = [ix.row_groups[g].key for g in np.argsort(ix.rg_rank)]
            mb, rank = self._mb_keys()
            cuts = np.searchsorted(mb, np.arange(len(self) + 1))
            keys = [by_rank[r] for r in rank.tolist()]
            self._trace = [tuple(keys[a:b]) for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist())]
        return list(self._trace)

    def build(self, i: int) -> Microbatch:
        """Microbatch i from the plan's arrays (about 20 numpy calls)."""
        ix = self.index
        a, b = int(self.bounds[i]), int(self.bounds[i + 1])
        if a == b:
            return empty_microbatch(i)
        lane, d0, d1 = self.lane[a:b], self.d0[a:b], self.d1[a:b]
        sizes, rg = self.chunk_rows[a:b], self.chunk_rg[a:b]
        pos = ranges(ix.dec_row0[d0], sizes)
        local = ix.lane_rows[pos]
        n_dec = d1 - d0
        decs = ranges(d0, n_dec)
        row_dec = np.repeat((decs - np.repeat(d0, n_dec)).astype(np.int32), ix.dec_row0[decs + 1] - ix.dec_row0[decs])
        row_ids = np.repeat(ix.rg_offset[rg], sizes) + local
        lane_dec_start = (d0 - ix.lane_dec0[lane]).astype(np.int32)
        out = np.arange(len(local), dtype=np.int32)
        ranks = ix.rg_rank[rg]
        if (ranks == ranks[0]).all():
            key = ix.row_groups[int(rg[0])].key
            take = {key: (local, out)}
        else:
            row_rank = np.repeat(ranks, sizes)
            order = np.argsort(row_rank, kind="stable")
            r_sorted = row_rank[order]
            cuts = np.flatnonzero(np.diff(r_sorted)) + 1
            firsts = np.concatenate([[0], cuts])
            by_rank = {int(ix.rg_rank[g]): ix.row_groups[int(g)].key for g in np.unique(rg)}
            take = {
                by_rank[int(r_sorted[f])]: (local[o], out[o]) for f, o in zip(firsts.tolist(), np.split(order, cuts))
            }
        return Microbatch(
            index=i,
            keys=tuple(take),
            take=take,
            row_lane=np.repeat(np.arange(b - a, dtype=np.int32), sizes),
            row_dec=row_dec,
            row_ids=row_ids,
            lane_ids=lane.astype(np.int64),
            lane_fresh=lane_dec_start == 0,
            lane_decisions=n_dec.astype(np.int32),
            lane_dec_start=lane_dec_start,
        )

    # -- shards ----------------------------------------------------------------------------
    def real(self) -> np.ndarray:
        """bool per microbatch: it holds rows (False for the padding that keeps shards in lockstep)."""
        return np.diff(self.bounds) > 0

    def padded(self, length: int) -> Plan:
        """This plan with empty microbatches appended up to `length` (a shard of a lockstep epoch)."""
        if length < len(self):
            raise ValueError(f"cannot pad a plan of {len(self)} microbatches to {length}")
        bounds = np.concatenate([self.bounds, np.full(length - len(self), self.bounds[-1], np.int64)])
        return Plan(
            self.index, self.lane, self.d0, self.d1, bounds, self.split, self.epoch, self.tbptt, width=self.width
        )

    @classmethod
    def interleave(cls, plans: Sequence[Plan]) -> Plan:
        """Microbatch i of every shard in shard order, then i + 1, ...: what `len(plans)` ranks run in
        lockstep, as one plan (shards that ran out contribute empty microbatches)."""
        first = plans[0]
        n = max(len(p) for p in plans)
        plans = [p.padded(n) for p in plans]
        lo = np.stack([p.bounds[:-1] for p in plans], axis=1).reshape(-1)  # position-major, shard-minor
        hi = np.stack([p.bounds[1:] for p in plans], axis=1).reshape(-1)
        base = np.cumsum([0] + [len(p.lane) for p in plans[:-1]])
        shard = np.tile(np.arange(len(plans)), n)
        take = ranges(lo + base[shard], hi - lo)
        lane, d0, d1 = (np.concatenate([getattr(p, a) for p in plans])[take] for a in ("lane", "d0", "d1"))
        bounds = np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64)
        return cls(first.index, lane, d0, d1, bounds, first.split, first.epoch, first.tbptt, width=first.width)

    # -- the whole plan ---------------------------------------------------------------------
    def row_ids(self) -> np.ndarray:
        """Every row id of the plan, in plan order (what the microbatches' row_ids concatenate to)."""
        ix = self.index
        return (
            np.repeat(ix.rg_offset[self.chunk_rg], self.chunk_rows)
            + ix.lane_rows[ranges(ix.dec_row0[self.d0], self.chunk_rows)]
        )

    def check_coverage(self, expected_row_ids: np.ndarray) -> None:
        """Every expected row exactly once, after putting rows back in order."""
        if self.microbatches.built:  # someone holds (and may have changed) microbatches: read them
            got = np.concatenate([mb.row_ids for mb in self] or [np.empty(0, np.int64)])
        else:
            got = self.row_ids()
        got, want = np.sort(got), np.sort(expected_row_ids)
        if len(got) != len(want) or not np.array_equal(got, want):
            dup = len(got) - len(np.unique(got))
            missing = len(np.setdiff1d(want, got))
            raise RuntimeError(
                f"{self.split} plan covers {len(got)} rows for {len(want)} expected ({dup} repeated, {missing} missing)"
            )

    def live_lanes(self, position: int) -> np.ndarray:
        """Lanes whose memory is still needed before microbatch `position`: started, not finished."""
        cut = int(self.bounds[min(max(position, 0), len(self))])
        lane, d0 = self.lane[cut:], self.d0[cut:]
        fresh = d0 == self.index.lane_dec0[lane]
        # a lane with a chunk still to come whose first chunk came before `position` (np.setdiff1d's sorted
        # unique answer, by a mask over lane ids: no sort of the rest of the plan at every latest/ save)
        if not len(lane):
            return lane[:0]
        live = np.zeros(int(lane.max()) + 1, bool)
        live[lane[~fresh]] = True
        live[lane[fresh]] = False
        return np.flatnonzero(live).astype(lane.dtype, copy=False)

    @property
    def stats(self) -> dict:
        if self._stats is None:
            self._stats = working_set_stats(self)
        return self._stats


def empty_microbatch(i: int) -> Microbatch:
    """Position i of a shard that has no work there: no rows, no lanes (the loader skips it)."""
    z32, z64 = np.empty(0, np.int32), np.empty(0, np.int64)
    return Microbatch(
        index=i,
        keys=(),
        take={},
        row_lane=z32,
        row_dec=z32,
        row_ids=z64,
        lane_ids=z64,
        lane_fresh=np.empty(0, bool),
        lane_decisions=z32,
        lane_dec_start=z32,
    )


class Microbatches(Sequence):
    """The plan's microbatches, built when asked for.

    ``plan.microbatches[i]`` is built once and kept (so a caller can hold and change it);
    iterating builds the ones not kept and lets them go, so walking an epoch holds one
    microbatch at a time.
    """

    def __init__(self, plan: Plan, start: int, stop: int, kept: dict | None = None) -> None:
        self.plan, self.start, self.stop = plan, start, stop
        self.kept: dict[int, Microbatch] = {} if kept is None else kept

    @property
    def built(self) -> bool:
        return bool(self.kept)

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i):
        if isinstance(i, slice):
            a, b, step = i.indices(len(self))
            if step != 1:
                return [self[j] for j in range(a, b, step)]
            return Microbatches(self.plan, self.start + a, self.start + max(a, b), self.kept)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        j = self.start + i
        if j not in self.kept:
            self.kept[j] = self.plan.build(j)
        return self.kept[j]

    def __iter__(self) -> Iterator[Microbatch]:
        for j in range(self.start, self.stop):
            yield self.at(j - self.start)

    def at(self, i: int) -> Microbatch:
        """Microbatch i as iterating gives it: the one kept, else built and not kept (any thread may ask: the
        loader's workers build what they assemble, off the training thread)."""
        mb = self.kept.get(self.start + i)
        return mb if mb is not None else self.plan.build(self.start + i)


def working_set_stats(plan: Plan) -> dict:
    """How many row groups are live (a lane started there and not finished) per microbatch."""
    n, ix = len(plan), plan.index
    lanes_per_mb = np.diff(plan.bounds)
    rows = np.diff(np.concatenate([[0], np.cumsum(plan.chunk_rows)])[plan.bounds])  # empty microbatches: 0
    mb_of_key, _ = plan._mb_keys()
    keys_per_mb = np.bincount(mb_of_key, minlength=n)
    if plan.tbptt and n:
        # a row group is live from the microbatch where one of its lanes starts to the one where it ends
        mb = np.repeat(np.arange(n, dtype=np.int64), lanes_per_mb)
        first = plan.d0 == ix.lane_dec0[plan.lane]
        last = plan.d1 == ix.lane_dec0[plan.lane + 1]
        lane_first, lane_last = np.zeros(ix.n_lanes, np.int64), np.zeros(ix.n_lanes, np.int64)
        lane_first[plan.lane[first]], lane_last[plan.lane[last]] = mb[first], mb[last]
        lanes = plan.lane[first]
        key, start, end = plan.chunk_rg[first], lane_first[lanes], lane_last[lanes]
        order = np.lexsort((start, key))
        key, start, end = key[order], start[order], end[order]
        big = n + 1  # per-key running max of interval ends: keys are offset so maxima never leak across keys
        run = np.maximum.accumulate(end + key * big) - key * big
        new = np.ones(len(key), bool)
        new[1:] = (key[1:] != key[:-1]) | (start[1:] > run[:-1])
        seg_start = start[new]
        seg_end = run[np.append(np.flatnonzero(new)[1:] - 1, len(key) - 1)]
        delta = np.bincount(seg_start, minlength=n + 1)[: n + 1] - np.bincount(seg_end + 1, minlength=n + 1)[: n + 1]
        sizes = np.cumsum(delta)[:n]
    else:  # stateless batches: nothing stays open between batches
        sizes = keys_per_mb
    return {
        "microbatches": n,
        "rows": int(rows.sum()),
        "mean_rows": float(np.mean(rows)) if n else 0.0,
        "mean_lanes": float(np.mean(lanes_per_mb)) if n else 0.0,
        "mean_live_row_groups": float(np.mean(sizes)) if n else 0.0,
        "max_live_row_groups": int(max(sizes)) if n else 0,
        "mean_keys_per_microbatch": float(np.mean(keys_per_mb)) if n else 0.0,
    }
