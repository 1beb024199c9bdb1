"""dataset.filter on the real game: resolved before planning, row groups pruned by their statistics, exact counts."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from tcgexp.app import compose
from tcgexp.config import build
from tcgexp.data import DataError
from tcgexp.data.schema import to_numpy
from tcgexp.plan import LaneIndex
from tests.conftest import planner_of
from tests.games.cabt.test_cabt import episode, write

pytestmark = pytest.mark.extra("cabt")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from tcgexp.games.cabt import demo

    kit = demo._db()
    base = tmp_path_factory.mktemp("filters")
    src = base / "in"
    # day 1: two low-rated agents; day 2: a strong one and a weak one, named
    for k in range(4):
        write(
            src,
            f"low{k}",
            episode(kit, 200 + k, "novice-grass", "novice-darkness") | {"info": {"TeamNames": ["lo1", "lo2"]}},
            {
                "endTime": {"seconds": 1785196800},
                "agents": [{"index": 0, "initialScore": 800.0}, {"index": 1, "initialScore": 850.0}],
            },
        )
        write(
            src,
            f"mix{k}",
            episode(kit, 300 + k) | {"info": {"TeamNames": ["hi", "mid"]}},
            {
                "endTime": {"seconds": 1785283200},
                "agents": [{"index": 0, "initialScore": 1500.0}, {"index": 1, "initialScore": 1100.0}],
            },
        )
    c = build(compose("dataset=cabt", f"dataset.root={base / 'data'}", "dataset.row_group_rows=256").dataset)
    c.import_episodes(str(src), None, lambda line: None)
    return base / "data"


def corpus(root, *overrides):
    c = build(compose("dataset=cabt", f"dataset.root={root}", "dataset.row_group_rows=256", *overrides).dataset)
    c.build()
    return c


def rows_where(c, pick) -> int:
    n = 0
    for f in c.files:
        cols = to_numpy(pq.read_table(f))
        n += int(pick(cols).sum())
    return n


@pytest.mark.parametrize(
    ("overrides", "pick"),
    [
        (("dataset.filter.min_rating=1000",), lambda c: np.nan_to_num(c["rating"], nan=-1) >= 1000),
        (("dataset.filter.players=[hi]",), lambda c: np.asarray(c["player"], object) == "hi"),
        (
            ("dataset.filter.players=[lo1,mid]", "dataset.filter.min_rating=820"),
            lambda c: (
                np.isin(np.asarray(c["player"], object), ["lo1", "mid"]) & (np.nan_to_num(c["rating"], nan=-1) >= 820)
            ),
        ),
    ],
)
def test_a_filter_plans_exactly_its_rows(root, overrides, pick):
    c = corpus(root, *overrides)
    index = LaneIndex.of(c)
    want = rows_where(c, pick)
    assert 0 < want < rows_where(c, lambda cols: np.ones(len(cols["label"]), bool))
    assert index.split_rows("train") + index.split_rows("val") == want
    planner = planner_of(index, chunk=8, batch_size=128, seed=0)
    plan = planner.epoch_plan(0)
    assert plan.rows == index.split_rows("train"), "planned = the filter's train rows"
    val = planner.validation_plan()  # checks its coverage: every chosen val row once
    assert val.rows == index.split_rows("val")
    # the planned rows are exactly the rows the filter passes, read back from the files
    chosen = []
    for r in index.row_groups:
        if r.split != "train":
            continue
        cols = to_numpy(pq.ParquetFile(c.files[r.key[0]]).read_row_group(r.key[1], columns=["rating", "player"]))
        chosen.append(r.row_offset + np.flatnonzero(pick(cols)))
    planned = np.sort(np.concatenate([plan.microbatches[i].row_ids for i in range(len(plan))]))
    assert np.array_equal(planned, np.sort(np.concatenate(chosen)))


def test_statistics_prune_whole_row_groups(root):
    c = corpus(root, "dataset.filter.min_rating=1000")
    index = LaneIndex.of(c)
    assert index.pruned >= 1, "the low-rated day's row groups are never read"
    assert all(k[0] == 1 for k in (r.key for r in index.row_groups)), "only the second day's row groups remain"


def test_a_filter_that_selects_nothing_is_one_line(root):
    c = corpus(root, "dataset.filter.min_rating=5000")
    with pytest.raises(DataError, match=r"dataset.filter \(min_rating=5000\) selects no decision"):
        LaneIndex.of(c)
    c = corpus(root, "dataset.filter.players=[nobody]")
    with pytest.raises(DataError, match="selects no decision"):
        LaneIndex.of(c)


def test_a_filter_on_the_simulator_is_refused(tmp_path):
    c = build(compose(f"dataset.root={tmp_path}", "dataset.rows_per_day=300", "dataset.filter.min_rating=1").dataset)
    c.build()
    with pytest.raises(DataError, match="columns"):
        LaneIndex.of(c)
