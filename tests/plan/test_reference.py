"""The vectorised planner gives exactly the plans of the per-object planner it replaced."""

from __future__ import annotations

import numpy as np
import pytest

from tcgexp.plan import LaneIndex
from tests.conftest import make_corpus, planner_of
from tests.plan import reference_planner as ref

FIELDS = ("row_lane", "row_dec", "row_ids", "lane_ids", "lane_fresh", "lane_decisions", "lane_dec_start")


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    corpus = make_corpus(
        tmp_path_factory.mktemp("reference") / "data",
        "dataset.rows_per_day=3000",
        "dataset.row_group_rows=256",
        "dataset.days=2",
        build_now=True,
    )
    manifests = [corpus.manifests[d] for d in corpus.dates]
    return LaneIndex(corpus.files, manifests), ref.LaneIndex(corpus.files, manifests)


def same_plan(new, old) -> None:
    assert len(new) == len(old) and new.rows == old.rows
    assert new.trace() == old.trace()
    assert new.stats == old.stats
    for a, b in zip(new, old):
        assert a.index == b.index and a.keys == b.keys
        assert list(a.take) == list(b.take)
        for k in b.take:
            for x, y in zip(a.take[k], b.take[k]):
                assert x.dtype == y.dtype and np.array_equal(x, y), (a.index, k)
        for f in FIELDS:
            x, y = getattr(a, f), getattr(b, f)
            assert x.dtype == y.dtype and np.array_equal(x, y), (a.index, f)


def test_lane_index_matches(indexes):
    new, old = indexes
    assert len(new.lanes) == len(old.lanes) and new.rows == old.rows
    assert [tuple(r.__dict__.values()) for r in new.row_groups] == [tuple(r.__dict__.values()) for r in old.row_groups]
    for a, b in zip(new.lanes, old.lanes):
        assert (a.index, a.episode_id, a.side, a.key) == (b.index, b.episode_id, b.side, b.key)
        for f in ("rows", "dec_bounds", "step_ids"):
            assert getattr(a, f).dtype == getattr(b, f).dtype and np.array_equal(getattr(a, f), getattr(b, f))
    size, lane, d = new.largest_decision()
    osize, olane, od = old.largest_decision()
    assert (size, lane.index, d) == (osize, olane.index, od)
    assert len(new.split_lanes("val")) == len(old.split_lanes("val"))


@pytest.mark.parametrize(
    "chunk, budget, order, enabled, seed",
    [
        (16, 256, "grouped", True, 0),
        (8, 128, "grouped", True, 3),
        (8, 128, "naive", True, 0),
        (1, 64, "grouped", True, 1),
        (64, 40, "naive", True, 2),
        (32, 512, "grouped", True, 5),
        (1, 100, "grouped", False, 0),
        (1, 100, "naive", False, 4),
        (16, 33, "grouped", False, 2),
    ],
    ids=str,
)
def test_plans_are_identical(indexes, chunk, budget, order, enabled, seed):
    new_ix, old_ix = indexes
    new = planner_of(new_ix, chunk=chunk, batch_size=budget, seed=seed, enabled=enabled, lane_order=order)
    old = ref.Planner(old_ix, chunk=chunk, batch_size=budget, seed=seed, enabled=enabled, order=order)
    for epoch in (0, 1):
        assert new.microbatches_per_epoch(epoch) == old.microbatches_per_epoch(epoch)
        same_plan(new.epoch_plan(epoch), old.epoch_plan(epoch))
    same_plan(new.validation_plan(), old.validation_plan())


def test_live_lanes_are_the_started_unfinished_ones(indexes):
    new_ix, _ = indexes
    plan = planner_of(new_ix, chunk=4, batch_size=64, seed=0).epoch_plan(0)
    started: set[int] = set()
    finished: set[int] = set()
    for pos, mb in enumerate(plan):
        assert plan.live_lanes(pos).tolist() == sorted(started - finished)  # each once, in order (setdiff1d's)
        for lane, s, n in zip(mb.lane_ids, mb.lane_dec_start, mb.lane_decisions):
            started.add(int(lane))
            if s + n == new_ix.lane(int(lane)).decisions:
                finished.add(int(lane))
    assert plan.live_lanes(len(plan)).size == 0 and plan.live_lanes(0).size == 0
