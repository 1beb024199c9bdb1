"""Sharded plans (data-parallel ranks): every row once over all shards, lockstep lengths, locality,
and the interleaved single-process plan that a world of ranks computes."""

from __future__ import annotations

import numpy as np
import pytest

from tcgexp.plan import LaneIndex
from tcgexp.plan.loader import TRAIN_COLUMNS, DirectSource, Loader
from tests.conftest import make_corpus, planner_of


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    corpus = make_corpus(tmp_path_factory.mktemp("shards"), "dataset.rows_per_day=1500", build_now=True)
    return LaneIndex.of(corpus)


def planner(index, **kw):
    return planner_of(index, **{"chunk": 8, "batch_size": 64, "seed": 3, **kw})


@pytest.mark.parametrize("order", ["grouped", "naive"])
@pytest.mark.parametrize("shards", [2, 3, 5])
@pytest.mark.parametrize("tbptt", [True, False], ids=["tbptt", "rows"])
def test_shards_cover_every_training_row_once_and_run_in_lockstep(index, shards, order, tbptt):
    whole = planner(index, lane_order=order, enabled=tbptt)
    ranks = [planner(index, lane_order=order, enabled=tbptt, shards=shards, shard=r) for r in range(shards)]
    for epoch in (0, 1):
        plans = [p.epoch_plan(epoch) for p in ranks]
        assert len({len(p) for p in plans}) == 1, "ranks must run the same number of positions"
        got = np.sort(np.concatenate([p.row_ids() for p in plans]))
        assert np.array_equal(got, np.sort(whole.epoch_plan(epoch).row_ids()))
        assert sum(int(p.real().sum()) for p in plans) == ranks[0].real_microbatches(epoch)
        # lanes are owned by one shard: no lane's chunks on two ranks (its memory stays put)
        owners = [set(p.lane.tolist()) for p in plans]
        assert all(not (owners[a] & owners[b]) for a in range(shards) for b in range(a + 1, shards))
        owner = ranks[0].lane_owner(epoch)
        for r, lanes in enumerate(owners):
            assert (owner[list(lanes)] == r).all()


def test_grouped_shards_split_by_whole_row_groups_and_balance_rows(index):
    ranks = [planner(index, shards=2, shard=r) for r in range(2)]
    plans = [p.epoch_plan(0) for p in ranks]
    groups = [set(p.chunk_rg.tolist()) for p in plans]
    assert not groups[0] & groups[1], "a row group is read by one rank only: each cache stays small"
    rows = [p.rows for p in plans]
    assert abs(rows[0] - rows[1]) <= max(r.rows for r in index.row_groups)
    real = [int(p.real().sum()) for p in plans]
    assert max(real) - min(real) <= 2


def test_interleaved_plan_is_the_ranks_microbatches_in_turn(index):
    ranks = [planner(index, shards=3, shard=r) for r in range(3)]
    inter = planner(index, shards=3).epoch_plan(0)
    plans = [p.epoch_plan(0) for p in ranks]
    assert len(inter) == 3 * len(plans[0])
    for i in range(len(plans[0])):
        for r in range(3):
            a, b = inter[3 * i + r], plans[r][i]
            assert np.array_equal(a.row_ids, b.row_ids) and np.array_equal(a.lane_ids, b.lane_ids)
            assert np.array_equal(a.lane_fresh, b.lane_fresh)


def test_checkpoint_lanes_are_the_union_over_shards(index):
    ranks = [planner(index, shards=2, shard=r) for r in range(2)]
    n = len(ranks[0].epoch_plan(0))
    for pos in (1, n // 3, n // 2, n - 1):
        want = np.union1d(*[p.shard_plans(0)[r].live_lanes(pos) for r, p in enumerate(ranks)])
        assert np.array_equal(ranks[0].live_lanes(0, pos), want)
        assert np.array_equal(ranks[1].live_lanes(0, pos), want)


def test_validation_shards_cover_every_validation_row_once(index):
    whole = planner(index).validation_plan()
    shards = [planner(index, shards=3, shard=r).validation_plan() for r in range(3)]
    got = np.sort(np.concatenate([p.row_ids() for p in shards]))
    assert np.array_equal(got, np.sort(whole.row_ids()))
    assert planner(index, shards=3).validation_plan().rows == whole.rows  # one process: all of it


def test_padding_positions_are_skipped_by_the_loader(index):
    shard = planner(index, shards=2, shard=0).shard_plans(0)[0]  # its own, unpadded
    plan = shard.padded(len(shard) + 2)
    got = list(Loader(DirectSource(index.files), TRAIN_COLUMNS, workers=1).iterate(plan, start=len(plan) - 3))
    assert [type(b).__name__ for b in got] == ["Batch", "Skip", "Skip"]
    assert [b.index for b in got] == [len(plan) - 3, len(plan) - 2, len(plan) - 1]
    assert plan.trace()[-1] == ()


@pytest.mark.parametrize(
    "bad",
    [{"shards": 0}, {"shards": 2, "shard": 2}, {"shards": 2, "shard": -1}],
    ids=["no-shards", "shard-past-end", "negative-shard"],
)
def test_impossible_shards_are_refused(index, bad):
    with pytest.raises(ValueError, match="shard"):
        planner(index, **bad)
