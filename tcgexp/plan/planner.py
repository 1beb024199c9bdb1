"""The TBPTT planner: lanes -> chunks -> packed microbatches, the epoch's real work list.

A chunk is at most ``chunk`` decisions of one lane and at most ``batch_size``
rows (decisions are never split). A microbatch packs chunks of *different*
lanes while the row budget holds, so chunk k+1 of a lane always lands in a
later microbatch than chunk k and can read the memory chunk k left behind.

Lane order is shuffled by seed every epoch, but in the default ``grouped``
order the shuffle permutes row groups and the lanes inside each row group,
never interleaving lanes of far-apart row groups: lanes are admitted in that
order, so only a few row groups are live at any time and a cache of a few
row groups suffices. ``naive`` (a global lane shuffle) is kept for comparison.

Shards (data-parallel ranks, ``tcgexp.lifecycle.distributed``): the epoch's lane
order is cut into ``shards`` parts, whole row groups at a time in that order
(each rank's cache holds only its own row groups), each row group going to
the shard with the fewest rows so far; each shard is packed on its own. A
rank runs its shard padded with empty microbatches to the longest shard's
length, so all ranks reach every optimizer step together. ``shard=None``
with several shards is the single-process equivalent: the shards'
microbatches interleaved (shard 0's i-th, shard 1's i-th, ...).

Everything is array work over the lane index except the packing itself,
which is a greedy decision per chunk (continue active lanes first, then admit
new ones) kept as one tight loop over plain ints. Plans are identical to the
per-object planner this replaced (``tests/plan/reference_planner.py``; a
test compares them).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from omegaconf import II, MISSING

from ..schema import INT32_MAX, schema, within
from .lanes import LaneIndex, decision_too_large
from .plan import Plan, ranges

ORDERS = ("grouped", "naive")


@schema("tbptt")
class TbpttConfig:
    """The TBPTT planner (``Planner``); the trainer supplies the lane index and the shards."""

    _target_: str = MISSING
    _partial_: bool = True
    enabled: bool = True  # false: plain batches of whole decisions, no memory carried between them
    # decisions per chunk: the gradient horizon; longer = more scan work per step (a microbatch's
    # row budget bounds what any chunk holds, so any length trains)
    chunk: int = 16
    batch_size: int = 256  # physical row budget per microbatch (a decision is never split): memory per step
    accum_steps: int = 1  # microbatches per optimizer update
    lane_order: str = "grouped"  # grouped: shuffle row groups, then lanes in each: few live row groups | naive
    seed: int = II("seed")  # the lane shuffle's seed: the run's
    # lane shards: null = one per rank (mlx.launch); N on one process = N ranks' plans interleaved
    # (then accum_steps is N x the ranks')
    shards: int | None = None
    NULLABLE: ClassVar[tuple] = ("shards",)
    UNPINNED: ClassVar[tuple] = ("shards",)  # checked against the checkpoint's world instead (setup.check_world)
    CHECKS: ClassVar[tuple] = (
        ("chunk", within(1, INT32_MAX), "in [1, 2**31) decisions"),
        ("batch_size", within(1, INT32_MAX), "in [1, 2**31) rows"),
        ("accum_steps", within(1, INT32_MAX), "in [1, 2**31)"),
        ("seed", within(0, 2**32, open_hi=True), "in [0, 2**32)"),
        ("shards", lambda v: v is None or within(1, 4096)(v), "null (one per rank) or in [1, 4096]"),
        ("lane_order", lambda v: v in ORDERS, "'grouped' or 'naive'"),
    )


def pack(first: list[int], last: list[int], chunk_rows: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Admit lanes in order; each microbatch continues active lanes first, then admits new ones.

    Lane k owns chunk ids first[k]..last[k]-1. Returns (chunk ids in placed order, microbatch
    bounds into it). An active lane whose next chunk does not fit waits for the next microbatch
    without blocking the lanes after it; admission stops at the first lane that does not fit.
    """
    placed: list[int] = []
    bounds = [0]
    nxt: list[int] = []  # active lanes: next chunk and end, in activation order
    end: list[int] = []
    q, n = 0, len(first)
    while q < n or nxt:
        rows = 0
        still_n, still_e = [], []
        for c, e in zip(nxt, end):
            r = chunk_rows[c]
            if rows + r <= budget:
                rows += r
                placed.append(c)
                c += 1
            if c < e:
                still_n.append(c)
                still_e.append(e)
        while q < n:
            c = first[q]
            r = chunk_rows[c]
            if rows + r > budget:
                break
            rows += r
            placed.append(c)
            if c + 1 < last[q]:
                still_n.append(c + 1)
                still_e.append(last[q])
            q += 1
        nxt, end = still_n, still_e
        bounds.append(len(placed))
    return placed, bounds


def fill(sizes: np.ndarray, budget: int) -> np.ndarray:
    """Bounds of greedy batches over items in order: a batch ends before the item that would overflow it."""
    cs = np.concatenate([[0], np.cumsum(sizes)])
    bounds, s, n = [0], 0, len(sizes)
    while s < n:
        s = int(np.searchsorted(cs, cs[s] + budget, side="right")) - 1
        bounds.append(s)
    return np.array(bounds, np.int64)


class Planner:
    def __init__(
        self,
        index: LaneIndex,
        *,
        chunk: int,
        batch_size: int,
        seed: int,
        enabled: bool,
        lane_order: str,
        accum_steps: int,
        shards: int | None,
        shard: int | None = None,
    ) -> None:
        """Built from the ``tbptt`` config group (its schema, ``TbpttConfig``, holds the defaults and
        checks); the trainer supplies `shards` (the world size, or ``tbptt.shards``; None: one) and
        `shard` (this rank)."""
        self.index, self.chunk, self.batch_size = index, chunk if enabled else 1, batch_size
        self.seed, self.enabled, self.order = seed, enabled, lane_order
        self.accum_steps = accum_steps
        shards = 1 if shards is None else shards  # ``tbptt.shards: null``: the trainer gives one per rank
        if shards < 1 or (shard is not None and not 0 <= shard < shards):
            raise ValueError(f"shard {shard} of {shards} shards: need shards >= 1 and 0 <= shard < shards")
        self.shards, self.shard = shards, (0 if shards == 1 else shard)
        self._chunks: tuple | None = None
        # the latest epochs' plans (this one's and the next's: the train cache's plan policy reads one epoch ahead),
        # asked for more than once each
        self._plans: dict[int, Plan] = {}
        self._counts: dict[int, int] = {}  # microbatches per epoch, from the packing alone
        self._shard_plans: dict[int, list[Plan]] = {}  # epoch -> [plan per shard], the latest epochs'
        if enabled:
            size, lane, d = index.largest_decision()
            if size > batch_size:
                raise decision_too_large(lane, d, batch_size, index.files[lane.key[0]])

    # -- chunks ----------------------------------------------------------------------------
    def chunk_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """Fixed chunk boundaries of every lane (independent of the shuffle): greedy, both bounds.

        One round per chunk position: every lane that still has decisions cuts its next chunk at
        once (at most `chunk` decisions, at most `batch_size` rows). Returns (first chunk id per
        lane + 1 sentinel, chunk d0, chunk d1, chunk rows as ints), chunks grouped by lane.
        """
        if self._chunks is None:
            ix = self.index
            row0 = ix.dec_row0
            p, stop = ix.lane_dec0[:-1].copy(), ix.lane_dec0[1:]
            todo = np.flatnonzero(p < stop)
            d0s, d1s = [], []
            while len(todo):
                pp, ee = p[todo], stop[todo]
                by_rows = np.searchsorted(row0, row0[pp] + self.batch_size, side="right") - 1
                e = np.minimum(np.minimum(pp + self.chunk, ee), by_rows)
                if (e == pp).any():
                    k = int(todo[np.argmax(e == pp)])
                    lane = ix.lane(k)
                    raise decision_too_large(lane, int(p[k] - ix.lane_dec0[k]), self.batch_size, ix.files[lane.key[0]])
                d0s.append(pp)
                d1s.append(e)
                p[todo] = e
                todo = todo[e < ee]
            d0 = np.concatenate(d0s) if d0s else np.empty(0, np.int64)
            d1 = np.concatenate(d1s) if d1s else np.empty(0, np.int64)
            order = np.argsort(d0, kind="stable")  # lanes' decisions are contiguous: this groups by lane
            d0, d1 = d0[order], d1[order]
            first = np.searchsorted(d0, ix.lane_dec0)
            self._chunks = (first, d0, d1, (row0[d1] - row0[d0]).tolist())
        return self._chunks

    # -- plans -----------------------------------------------------------------------------
    def lane_order(self, split: str, epoch: int | None) -> np.ndarray:
        """Lane ids of `split` in admission order (the same random stream as ever, call for call)."""
        ix = self.index
        lanes = ix.split_lane_ids(split)
        if epoch is None:  # validation: file order, no shuffle
            return lanes
        rng = np.random.default_rng([self.seed, epoch])
        if self.order == "naive":
            return lanes[rng.permutation(len(lanes))]
        # lanes of one row group are contiguous in index order: groups are runs of lane_rg
        rg = ix.lane_rg[lanes]
        starts = np.flatnonzero(np.diff(rg, prepend=-1)) if len(lanes) else np.empty(0, np.int64)
        sizes = np.diff(np.append(starts, len(lanes)))
        starts_l, sizes_l = starts.tolist(), sizes.tolist()
        parts = [starts_l[k] + rng.permutation(sizes_l[k]) for k in rng.permutation(len(starts_l)).tolist()]
        return lanes[np.concatenate(parts)] if parts else lanes

    def epoch_plan(self, epoch: int) -> Plan:
        """What this process runs in epoch `epoch`: the whole plan, its shard (padded), or the
        shards interleaved (``shard=None``)."""
        if epoch not in self._plans:
            if self.shards == 1:
                plan = self._plan("train", epoch)
            else:
                plans = self.shard_plans(epoch)
                n = max(len(p) for p in plans)
                plan = Plan.interleave(plans) if self.shard is None else plans[self.shard].padded(n)
            self._plans[epoch] = keep_latest(self._plans, plan)
        return self._plans[epoch]

    def shard_plans(self, epoch: int) -> list[Plan]:
        """Every shard's own plan of epoch `epoch` (unpadded): any rank can compute any rank's."""
        if epoch not in self._shard_plans:
            lanes = self.lane_order("train", epoch)
            self._shard_plans[epoch] = keep_latest(
                self._shard_plans, [self._pack(part, "train", epoch) for part in self.partition(lanes)]
            )
        return self._shard_plans[epoch]

    def partition(self, lanes: np.ndarray) -> list[np.ndarray]:
        """`lanes` (in admission order) cut into `shards` parts: whole runs of one row group, each to
        the part with the fewest rows so far (ties: the lowest), order kept inside each part."""
        if self.shards == 1:
            return [lanes]
        ix = self.index
        rg = ix.lane_rg[lanes]
        starts = np.flatnonzero(np.diff(rg, prepend=-1)) if len(lanes) else np.empty(0, np.int64)
        lane_rows = ix.dec_row0[ix.lane_dec0[lanes + 1]] - ix.dec_row0[ix.lane_dec0[lanes]]
        run_rows = np.add.reduceat(lane_rows, starts).tolist() if len(lanes) else []
        load, owner = [0] * self.shards, np.empty(len(starts), np.int64)
        for k, r in enumerate(run_rows):  # one step per row group (per lane in the naive order)
            s = load.index(min(load))
            owner[k], load[s] = s, load[s] + r
        lane_owner = np.repeat(owner, np.diff(np.append(starts, len(lanes))))
        return [lanes[lane_owner == s] for s in range(self.shards)]

    def lane_owner(self, epoch: int) -> np.ndarray:
        """Shard of every lane in epoch `epoch` (-1: not a training lane): whose memory is whose."""
        owner = np.full(self.index.n_lanes, -1, np.int64)
        plans = self.shard_plans(epoch) if self.shards > 1 else [self.epoch_plan(epoch)]  # already made
        for s, plan in enumerate(plans):
            owner[plan.lane] = s
        return owner

    def real_microbatches(self, epoch: int) -> int:
        """Microbatches with rows in epoch `epoch`, over all shards (padding left out)."""
        if self.shards == 1:
            return self.microbatches_per_epoch(epoch)
        return sum(len(p) for p in self.shard_plans(epoch))

    def microbatches_per_epoch(self, epoch: int) -> int:
        """len(epoch_plan(epoch)); without shards from the packing alone (no plan arrays are built).

        Counted once per epoch: start-up asks for every epoch's microbatches, optimizer steps and real
        microbatches (the schedule's horizon), and packing a year of lanes takes most of a second."""
        if epoch in self._plans:
            return len(self._plans[epoch])
        if self.shards > 1:
            return len(self.epoch_plan(epoch))
        if epoch not in self._counts:
            lanes = self.lane_order("train", epoch)
            if not self.enabled:
                self._counts[epoch] = len(self._rows_plan(lanes, epoch)[1]) - 1
            else:
                first, _, _, rows = self.chunk_table()
                _, bounds = pack(first[lanes].tolist(), first[lanes + 1].tolist(), rows, self.batch_size)
                self._counts[epoch] = len(bounds) - 1
        return self._counts[epoch]

    def steps_per_epoch(self, epoch: int) -> int:
        """Optimizer steps of epoch `epoch`: ceil(microbatches / accum_steps), the last window partial."""
        return -(-self.microbatches_per_epoch(epoch) // self.accum_steps)

    def live_lanes(self, epoch: int, position: int) -> np.ndarray:
        """Lanes whose carried memory the rest of epoch `epoch` reads, from microbatch `position` on
        (of every shard: a checkpoint holds all ranks' lanes).

        None at an epoch boundary (memory is reset there): what a checkpoint must keep.
        """
        if position <= 0:
            return np.empty(0, np.int64)
        if self.shards > 1 and self.shard is not None:
            return np.unique(np.concatenate([p.live_lanes(position) for p in self.shard_plans(epoch)]))
        return self.epoch_plan(epoch).live_lanes(position)

    def validation_plan(self) -> Plan:
        """This rank's share of validation (every validation row exactly once over all ranks), or all
        of it in one process. Validation carries memory but no gradient: no lockstep needed."""
        if self.shards == 1 or self.shard is None:
            plan = self._plan("val", None)
            plan.check_coverage(self.split_row_ids("val"))
            return plan
        plans = [self._pack(part, "val", None) for part in self.partition(self.lane_order("val", None))]
        whole = Plan.interleave(plans)  # every shard's rows, for the global coverage check
        whole.check_coverage(self.split_row_ids("val"))
        return plans[self.shard]

    def split_rows(self, split: str) -> int:
        """How many rows `split` has (what validation must process, over all ranks)."""
        return sum(r.rows for r in self.index.row_groups if r.split == split)

    def split_row_ids(self, split: str) -> np.ndarray:
        chosen = self.index.selected  # a filtered index: each row group's chosen rows
        return np.concatenate(
            [
                (r.row_offset + chosen[i]) if chosen else np.arange(r.row_offset, r.row_offset + r.rows, dtype=np.int64)
                for i, r in enumerate(self.index.row_groups)
                if r.split == split
            ]
            or [np.empty(0, np.int64)]
        )

    def _plan(self, split: str, epoch: int | None) -> Plan:
        return self._pack(self.lane_order(split, epoch), split, epoch)

    def _pack(self, lanes: np.ndarray, split: str, epoch: int | None) -> Plan:
        if not self.enabled:
            d, bounds = self._rows_plan(lanes, epoch)
            return Plan(self.index, self._lane_of(d), d, d + 1, bounds, split, epoch, False, width=self.chunk)
        first, d0, d1, rows = self.chunk_table()
        placed, bounds = pack(first[lanes].tolist(), first[lanes + 1].tolist(), rows, self.batch_size)
        placed = np.array(placed, np.int64)
        lane_of_chunk = self._lane_of(d0[placed])
        bounds = np.array(bounds, np.int64)
        return Plan(self.index, lane_of_chunk, d0[placed], d1[placed], bounds, split, epoch, True, width=self.chunk)

    def _lane_of(self, d: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.index.lane_dec0, d, side="right") - 1

    def _rows_plan(self, lanes: np.ndarray, epoch: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Without TBPTT: plain batches of `batch_size` rows that run across row-group boundaries.

        Each decision is its own one-decision 'chunk' (stateless; a decision's rows still travel
        together). Returns (global decision ids in placed order, batch bounds).
        """
        ix = self.index
        n_dec = ix.lane_dec0[lanes + 1] - ix.lane_dec0[lanes]
        d = ranges(ix.lane_dec0[lanes], n_dec)
        if epoch is not None:  # shuffle decisions inside each row group; row groups keep lane order
            rng = np.random.default_rng([self.seed, epoch, 1])
            rg = np.repeat(ix.lane_rg[lanes], n_dec)
            uniq, first_seen = np.unique(rg, return_index=True)
            rank = np.empty(len(ix.row_groups), np.int64)
            rank[uniq[np.argsort(first_seen)]] = np.arange(len(uniq))
            d = d[np.argsort(rank[rg], kind="stable")]  # blocks in order of first appearance
            sizes = np.bincount(rank[rg], minlength=len(uniq))
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            d = d[
                np.concatenate(
                    [s + rng.permutation(n) for s, n in zip(starts.tolist(), sizes.tolist())] or [np.empty(0, np.int64)]
                )
            ]
        sizes = ix.dec_row0[d + 1] - ix.dec_row0[d]
        if len(d) and sizes.max() > self.batch_size:
            k = int(np.argmax(sizes > self.batch_size))
            lane = ix.lane(int(self._lane_of(d[k : k + 1])[0]))
            raise decision_too_large(lane, int(d[k] - ix.lane_dec0[lane.index]), self.batch_size, ix.files[lane.key[0]])
        return d, fill(sizes, self.batch_size)


KEPT_PLANS = 2  # an epoch's plan and the next's: the train cache's plan policy reads one epoch ahead


def keep_latest(kept: dict, made):
    """`made`, after dropping the oldest of `kept` (insertion order) so that it and `made` are ``KEPT_PLANS``."""
    while len(kept) >= KEPT_PLANS:
        del kept[next(iter(kept))]
    return made
