"""The TBPTT planner contract: bounds, indivisibility, packing, exact counts, coverage, errors."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tcgexp.data import DataError
from tcgexp.plan import LaneIndex
from tests.conftest import make_corpus, planner_of


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan") / "data"
    return make_corpus(
        root, "dataset.rows_per_day=3000", "dataset.row_group_rows=256", "dataset.days=2", build_now=True
    )


@pytest.fixture(scope="module")
def index(corpus):
    return LaneIndex(corpus.files, [corpus.manifests[d] for d in corpus.dates])


@pytest.fixture(scope="module")
def decision_of_row(corpus):
    return np.concatenate([pq.read_table(f, columns=["decision_id"]).column(0).to_numpy() for f in corpus.files])


def chunk_rows_ok(plan, chunk, budget):
    for mb in plan:
        assert mb.rows <= budget
        assert len(np.unique(mb.lane_ids)) == mb.lanes, "a lane appears once per microbatch"
        assert (mb.lane_decisions <= chunk).all() and (mb.lane_decisions >= 1).all()
        for slot in range(mb.lanes):
            decs = mb.row_dec[mb.row_lane == slot]
            assert decs[0] == 0 and (np.diff(decs) >= 0).all() and decs[-1] == mb.lane_decisions[slot] - 1


@pytest.mark.parametrize("chunk, budget", [(1, 64), (4, 64), (16, 256), (32, 512), (64, 40)], ids=lambda v: str(v))
def test_bounds_packing_and_exact_coverage(index, chunk, budget):
    planner = planner_of(index, chunk=chunk, batch_size=budget, seed=3)
    plan = planner.epoch_plan(0)
    assert planner.microbatches_per_epoch(0) == len(plan)
    chunk_rows_ok(plan, chunk, budget)
    plan.check_coverage(planner.split_row_ids("train"))
    assert plan.rows == index.split_rows("train") == plan.stats["rows"]
    assert len(plan) == plan.stats["microbatches"]
    if budget >= 256:
        assert plan.stats["mean_lanes"] > 4, "independent lane chunks are packed together"


def test_lane_chunks_follow_each_other_and_fresh_marks_lane_start(index):
    plan = planner_of(index, chunk=8, batch_size=128, seed=0).epoch_plan(1)
    next_dec: dict[int, int] = {}
    for mb in plan:
        for lane, fresh, start, n in zip(mb.lane_ids, mb.lane_fresh, mb.lane_dec_start, mb.lane_decisions):
            assert start == next_dec.get(int(lane), 0), "chunk k+1 comes after chunk k, nothing skipped"
            assert fresh == (start == 0)
            next_dec[int(lane)] = int(start + n)
    assert next_dec == {lane.index: lane.decisions for lane in index.split_lanes("train")}


def test_decisions_are_indivisible(index, decision_of_row):
    plan = planner_of(index, chunk=3, batch_size=24, seed=0).epoch_plan(0)
    where = {}
    for mb in plan:
        for d in np.unique(decision_of_row[mb.row_ids]):
            assert where.setdefault(int(d), mb.index) == mb.index, f"decision {d} split across microbatches"
    multi = [lane for lane in index.lanes if (lane.decision_rows() > 1).any()]
    assert multi, "the corpus has multi-row decisions to keep together"


@pytest.mark.parametrize("accum", [1, 2, 3, 7, 1000])
def test_optimizer_steps_are_ceil_of_microbatches(index, accum):
    plan = planner_of(index, chunk=16, batch_size=128, seed=0).epoch_plan(0)
    assert plan.optimizer_steps(accum) == -(-len(plan) // accum) == int(np.ceil(len(plan) / accum))


def test_validation_plan_covers_every_val_row_once_in_file_order(index):
    planner = planner_of(index, chunk=16, batch_size=256, seed=0)
    val = planner.validation_plan()
    assert val.rows == index.split_rows("val") > 0
    assert val.trace() == planner.validation_plan().trace(), "validation is not shuffled"
    val.microbatches[0].row_ids = val.microbatches[0].row_ids.copy()
    val.microbatches[0].row_ids[0] = val.microbatches[1].row_ids[0]
    with pytest.raises(RuntimeError, match="1 repeated, 1 missing"):
        val.check_coverage(planner.split_row_ids("val"))


def test_shuffle_is_by_seed_and_epoch(index):
    a = planner_of(index, chunk=16, batch_size=256, seed=1)
    assert [m.lane_ids.tolist() for m in a.epoch_plan(0)] == [
        m.lane_ids.tolist() for m in planner_of(index, chunk=16, batch_size=256, seed=1).epoch_plan(0)
    ]
    assert a.epoch_plan(0).trace() != a.epoch_plan(1).trace()
    b = planner_of(index, chunk=16, batch_size=256, seed=2)
    assert [m.lane_ids.tolist() for m in a.epoch_plan(0)] != [m.lane_ids.tolist() for m in b.epoch_plan(0)]


def test_grouped_order_keeps_few_row_groups_live(index):
    grouped = planner_of(index, chunk=16, batch_size=256, seed=0).epoch_plan(0).stats
    naive = planner_of(index, chunk=16, batch_size=256, seed=0, lane_order="naive").epoch_plan(0).stats
    # ~16 lanes per microbatch, ~8 lanes per 256-row row group: 2-3 row groups must be live
    assert grouped["max_live_row_groups"] <= 6
    assert naive["mean_live_row_groups"] > 2 * grouped["mean_live_row_groups"]


def test_decision_larger_than_budget_names_lane_and_budget_needed(index):
    size, lane, d = index.largest_decision()
    assert size > 1
    with pytest.raises(DataError) as err:
        planner_of(index, chunk=16, batch_size=size - 1)
    msg = str(err.value)
    assert f"episode_id={lane.episode_id}, side={lane.side}" in msg
    assert f"tbptt.batch_size>={size}" in msg and f"step_id {int(lane.step_ids[d])}" in msg
    planner_of(index, chunk=16, batch_size=size)  # exactly enough is fine


def test_non_contiguous_step_id_names_file_row_group_and_lane(corpus, tmp_path):
    date = corpus.dates[0]
    table = pq.read_table(corpus.files[0])
    manifest = corpus.manifests[date]
    rg = manifest["row_groups"][1]
    start = sum(r["rows"] for r in manifest["row_groups"][:1])
    ep, side = table.column("episode_id").to_numpy(), table.column("side").to_numpy()
    step = table.column("step_id").to_numpy().copy()
    # lane of the row group's first row: its 4th decision claims step 1 again (0, 1, 2, 1: not contiguous)
    lane_rows = np.flatnonzero((ep == ep[start]) & (side == side[start]))
    later = lane_rows[np.flatnonzero(step[lane_rows] == 3)[0]]
    step[later] = 1
    bad = table.set_column(table.schema.get_field_index("step_id"), "step_id", pa.array(step, pa.int32()))
    path = tmp_path / "bad.parquet"
    with pq.ParquetWriter(path, bad.schema) as w:
        offset = 0
        for r in manifest["row_groups"]:
            w.write_table(bad.slice(offset, r["rows"]), row_group_size=r["rows"])
            offset += r["rows"]
    with pytest.raises(DataError) as err:
        LaneIndex([path], [json.loads(json.dumps(manifest))])
    msg = str(err.value)
    assert str(path) in msg and f"row group {rg['index']}" in msg
    assert f"episode_id={int(ep[start])}, side={int(side[start])}" in msg and "non-contiguously" in msg


def test_plain_batch_plan_without_tbptt(index, decision_of_row):
    planner = planner_of(index, chunk=16, batch_size=100, seed=0, enabled=False)
    plan = planner.epoch_plan(0)
    assert planner.microbatches_per_epoch(0) == len(plan)
    plan.check_coverage(planner.split_row_ids("train"))
    assert all(mb.rows <= 100 for mb in plan)
    assert all(mb.rows > 100 - 8 for mb in plan.microbatches[:-1]), "batches are full up to a decision"
    assert (np.concatenate([mb.lane_decisions for mb in plan]) == 1).all()
    keys_per_batch = [len(mb.keys) for mb in plan]
    assert max(keys_per_batch) >= 2, "batches run across row-group boundaries"
