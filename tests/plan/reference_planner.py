"""The planner as it was before issue 14: one Python object per lane and chunk (the reference).

Kept only for the test that the vectorised planner (``tcgexp.plan``) produces
identical plans (``test_reference.py``) and for the scale benchmark (old vs new
plan time), which times it where the tests are importable (run from a
checkout). A test fixture, outside the package: not used by the trainer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from tcgexp.data.errors import DataError
from tests.plan.reference_lanes import Key, Lane, LaneIndex, RowGroupRef, decision_too_large  # noqa: F401

ORDERS = ("grouped", "naive")


@dataclass
class Chunk:
    lane: Lane
    dec_start: int  # first decision (lane-local)
    dec_end: int  # one past the last decision
    row_start: int  # lane-local row positions
    row_end: int

    @property
    def rows(self) -> int:
        return self.row_end - self.row_start


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


@dataclass
class Plan:
    microbatches: list[Microbatch]
    split: str
    epoch: int | None
    tbptt: bool
    stats: dict = field(default_factory=dict)

    def __len__(self) -> int:  # microbatches_per_epoch
        return len(self.microbatches)

    def __iter__(self) -> Iterator[Microbatch]:
        return iter(self.microbatches)

    def __getitem__(self, i: int) -> Microbatch:
        return self.microbatches[i]

    @property
    def rows(self) -> int:
        return sum(mb.rows for mb in self.microbatches)

    def optimizer_steps(self, accum_steps: int) -> int:
        return -(-len(self) // accum_steps)  # ceil: the last partial window is applied too

    def trace(self) -> list[tuple[Key, ...]]:
        """The full future access trace: row groups touched, position by position."""
        return [mb.keys for mb in self.microbatches]

    def check_coverage(self, expected_row_ids: np.ndarray) -> None:
        """Every expected row exactly once, after putting rows back in order."""
        got = (
            np.sort(np.concatenate([mb.row_ids for mb in self.microbatches]))
            if self.microbatches
            else np.empty(0, np.int64)
        )
        want = np.sort(expected_row_ids)
        if len(got) != len(want) or not np.array_equal(got, want):
            dup = len(got) - len(np.unique(got))
            missing = len(np.setdiff1d(want, got))
            raise RuntimeError(
                f"{self.split} plan covers {len(got)} rows for {len(want)} expected ({dup} repeated, {missing} missing)"
            )


class Planner:
    def __init__(
        self,
        index: LaneIndex,
        *,
        chunk: int,
        batch_size: int,
        seed: int = 0,
        enabled: bool = True,
        order: str = "grouped",
    ) -> None:
        if chunk < 1 or batch_size < 1:
            raise DataError(f"tbptt.chunk={chunk} and tbptt.batch_size={batch_size} must both be >= 1")
        if order not in ORDERS:
            raise DataError(f"tbptt.lane_order={order!r} is not one of {ORDERS}")
        self.index, self.chunk, self.batch_size = index, chunk, batch_size
        self.seed, self.enabled, self.order = seed, enabled, order
        self._chunks: dict[int, list[Chunk]] = {}
        if enabled:
            size, lane, d = index.largest_decision()
            if size > batch_size:
                raise decision_too_large(lane, d, batch_size, index.files[lane.key[0]])

    # -- chunks ----------------------------------------------------------------------------
    def chunks(self, lane: Lane) -> list[Chunk]:
        """Fixed chunk boundaries per lane (independent of the shuffle): greedy, both bounds."""
        if lane.index not in self._chunks:
            sizes, bounds, out, d = lane.decision_rows(), lane.dec_bounds, [], 0
            while d < lane.decisions:
                e, rows = d, 0
                while e < lane.decisions and e - d < self.chunk and rows + sizes[e] <= self.batch_size:
                    rows += int(sizes[e])
                    e += 1
                if e == d:
                    raise decision_too_large(lane, d, self.batch_size, self.index.files[lane.key[0]])
                out.append(Chunk(lane, d, e, int(bounds[d]), int(bounds[e])))
                d = e
            self._chunks[lane.index] = out
        return self._chunks[lane.index]

    # -- plans -----------------------------------------------------------------------------
    def lane_order(self, split: str, epoch: int | None) -> list[Lane]:
        lanes = self.index.split_lanes(split)
        if epoch is None:  # validation: file order, no shuffle
            return lanes
        rng = np.random.default_rng([self.seed, epoch])
        if self.order == "naive":
            return [lanes[i] for i in rng.permutation(len(lanes))]
        by_key: dict[Key, list[Lane]] = {}
        for lane in lanes:
            by_key.setdefault(lane.key, []).append(lane)
        keys = list(by_key)
        out: list[Lane] = []
        for k in rng.permutation(len(keys)):
            group = by_key[keys[k]]
            out.extend(group[i] for i in rng.permutation(len(group)))
        return out

    def epoch_plan(self, epoch: int) -> Plan:
        return self._plan("train", epoch)

    def microbatches_per_epoch(self, epoch: int) -> int:
        """len(epoch_plan(epoch)) without building the microbatches' arrays (~30x cheaper)."""
        lanes = self.lane_order("train", epoch)
        return len(self._pack(lanes) if self.enabled else self._rows_plan(lanes, epoch))

    def validation_plan(self) -> Plan:
        plan = self._plan("val", None)
        plan.check_coverage(self.split_row_ids("val"))
        return plan

    def split_row_ids(self, split: str) -> np.ndarray:
        return np.concatenate(
            [
                np.arange(r.row_offset, r.row_offset + r.rows, dtype=np.int64)
                for r in self.index.row_groups
                if r.split == split
            ]
            or [np.empty(0, np.int64)]
        )

    def _plan(self, split: str, epoch: int | None) -> Plan:
        lanes = self.lane_order(split, epoch)
        packed = self._pack(lanes) if self.enabled else self._rows_plan(lanes, epoch)
        mbs = [self._microbatch(i, chunks) for i, chunks in enumerate(packed)]
        plan = Plan(mbs, split, epoch, self.enabled)
        plan.stats = working_set_stats(plan, packed)
        return plan

    def _pack(self, lanes: list[Lane]) -> list[list[Chunk]]:
        """Admit lanes in order; each microbatch continues active lanes first, then admits new ones."""
        queue = deque(deque(self.chunks(lane)) for lane in lanes)
        active: list[deque] = []
        packed = []
        while queue or active:
            mb, rows, still = [], 0, []
            for pending in active:
                if rows + pending[0].rows <= self.batch_size:
                    rows += pending[0].rows
                    mb.append(pending.popleft())
                if pending:
                    still.append(pending)
            while queue and rows + queue[0][0].rows <= self.batch_size:
                pending = queue.popleft()
                rows += pending[0].rows
                mb.append(pending.popleft())
                if pending:
                    still.append(pending)
            active = still
            packed.append(mb)
        return packed

    def _rows_plan(self, lanes: list[Lane], epoch: int | None) -> list[list[Chunk]]:
        """Without TBPTT: plain batches of `batch_size` rows that run across row-group boundaries.

        Each row is its own one-decision 'chunk' (stateless); the row-group order follows the
        same lane order, so consecutive batches still share row groups.
        """
        singles = []
        for lane in lanes:
            b = lane.dec_bounds
            # a decision is still indivisible: its rows travel together
            singles.extend(Chunk(lane, d, d + 1, int(b[d]), int(b[d + 1])) for d in range(lane.decisions))
        if epoch is not None:  # shuffle decisions inside each row group; row groups keep lane order
            rng = np.random.default_rng([self.seed, epoch, 1])
            blocks: dict[Key, list[Chunk]] = {}
            for c in singles:
                blocks.setdefault(c.lane.key, []).append(c)
            singles = [blk[i] for blk in blocks.values() for i in rng.permutation(len(blk))]
        packed, mb, rows = [], [], 0
        for c in singles:
            if c.rows > self.batch_size:
                raise decision_too_large(c.lane, c.dec_start, self.batch_size, self.index.files[c.lane.key[0]])
            if rows + c.rows > self.batch_size:
                packed.append(mb)
                mb, rows = [], 0
            mb.append(c)
            rows += c.rows
        if mb:
            packed.append(mb)
        return packed

    def _microbatch(self, i: int, chunks: list[Chunk]) -> Microbatch:
        sizes = np.array([c.rows for c in chunks], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        total = int(starts[-1])
        row_lane = np.repeat(np.arange(len(chunks), dtype=np.int32), sizes)
        row_dec = np.empty(total, np.int32)
        row_ids = np.empty(total, np.int64)
        local: dict[Key, list[tuple[np.ndarray, np.ndarray]]] = {}
        for j, c in enumerate(chunks):
            lane = c.lane
            rows = lane.rows[c.row_start : c.row_end]
            dec_sizes = np.diff(lane.dec_bounds[c.dec_start : c.dec_end + 1])
            out = np.arange(starts[j], starts[j + 1], dtype=np.int32)
            row_dec[out] = np.repeat(np.arange(len(dec_sizes), dtype=np.int32), dec_sizes)
            row_ids[out] = self.index.row_group(lane.key).row_offset + rows
            local.setdefault(lane.key, []).append((rows, out))
        take = {
            k: (np.concatenate([r for r, _ in v]), np.concatenate([o for _, o in v])) for k, v in sorted(local.items())
        }
        return Microbatch(
            index=i,
            keys=tuple(sorted(local)),
            take=take,
            row_lane=row_lane,
            row_dec=row_dec,
            row_ids=row_ids,
            lane_ids=np.array([c.lane.index for c in chunks], np.int64),
            lane_fresh=np.array([c.dec_start == 0 for c in chunks], bool),
            lane_decisions=np.array([c.dec_end - c.dec_start for c in chunks], np.int32),
            lane_dec_start=np.array([c.dec_start for c in chunks], np.int32),
        )


def working_set_stats(plan: Plan, packed: list[list[Chunk]]) -> dict:
    """How many row groups are live (a lane started there and not finished) per microbatch."""
    live: dict[Key, int] = {}
    sizes = []
    for chunks in packed if plan.tbptt else []:
        for c in chunks:
            if c.dec_start == 0:
                live[c.lane.key] = live.get(c.lane.key, 0) + 1
        sizes.append(len(live))
        for c in chunks:
            if c.dec_end == c.lane.decisions:
                live[c.lane.key] -= 1
                if not live[c.lane.key]:
                    del live[c.lane.key]
    if not plan.tbptt:  # stateless batches: nothing stays open between batches
        sizes = [len(mb.keys) for mb in plan.microbatches]
    rows = [sum(c.rows for c in chunks) for chunks in packed]
    return {
        "microbatches": len(packed),
        "rows": int(sum(rows)),
        "mean_rows": float(np.mean(rows)) if rows else 0.0,
        "mean_lanes": float(np.mean([len(c) for c in packed])) if packed else 0.0,
        "mean_live_row_groups": float(np.mean(sizes)) if sizes else 0.0,
        "max_live_row_groups": int(max(sizes)) if sizes else 0,
        "mean_keys_per_microbatch": float(np.mean([len(m.keys) for m in plan.microbatches])) if packed else 0.0,
    }
