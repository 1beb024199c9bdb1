"""The loader: plan-order batches, equal to a direct Parquet read under every policy and worker count."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tcgexp.plan import LaneIndex
from tcgexp.plan.loader import TRAIN_COLUMNS, DirectSource, Loader
from tests.conftest import CACHE_POLICIES, cache_of, make_corpus, planner_of


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    corpus = make_corpus(
        tmp_path_factory.mktemp("loader") / "data",
        "dataset.rows_per_day=2500",
        "dataset.row_group_rows=256",
        build_now=True,
    )
    index = LaneIndex(corpus.files, [corpus.manifests[d] for d in corpus.dates])
    plan = planner_of(index, chunk=8, batch_size=96, seed=0).epoch_plan(0)
    reference = list(Loader(DirectSource(corpus.files), workers=0).iterate(plan))
    return corpus, plan, reference


def same(a, b):
    assert a.index == b.index and list(a.arrays) == list(b.arrays)
    for k in a.arrays:
        assert a.arrays[k].dtype == b.arrays[k].dtype and a.arrays[k].shape == b.arrays[k].shape
        assert a.arrays[k].tobytes() == b.arrays[k].tobytes(), k


def test_reference_batches_match_plan_rows(setup):
    corpus, _plan, reference = setup
    import pyarrow.parquet as pq

    table = pq.read_table(corpus.files[0], columns=["features", "label"])
    feats = np.asarray(table.column("features").combine_chunks().flatten()).reshape(table.num_rows, -1)
    labels = table.column("label").to_numpy()
    for batch in reference:
        assert batch.arrays["features"].ndim == 2 and batch.arrays["action_mask"].ndim == 2
        np.testing.assert_array_equal(batch.arrays["features"], feats[batch.mb.row_ids])
        np.testing.assert_array_equal(batch.arrays["label"], labels[batch.mb.row_ids])


@pytest.mark.parametrize("policy", CACHE_POLICIES)
@pytest.mark.parametrize("workers", [0, 1, 3])
def test_every_policy_and_worker_count_gives_identical_batches(setup, tmp_path, policy, workers):
    corpus, plan, reference = setup
    with cache_of(
        corpus.files,
        TRAIN_COLUMNS,
        policy=policy,
        capacity=2,
        spill=True,
        spill_dir=tmp_path / "spill",
        spill_budget_bytes=1 << 22,
    ) as cache:
        cache.set_trace(plan.trace())
        loader = Loader(cache, TRAIN_COLUMNS, workers=workers)
        got = list(loader.iterate(plan))
        c = cache.counters()
    assert [b.index for b in got] == list(range(len(plan)))
    for a, b in zip(got, reference):
        same(a, b)
    assert c["hits"] + c["misses"] == c["accesses"] == sum(len(mb.take) for mb in plan)


def test_resume_mid_plan_yields_the_tail(setup):
    corpus, plan, reference = setup
    tail = list(Loader(DirectSource(corpus.files), workers=2).iterate(plan, start=5))
    assert [b.index for b in tail] == list(range(5, len(plan)))
    for a, b in zip(tail, reference[5:]):
        same(a, b)


def test_workers_stay_bounded_ahead_of_the_consumer(setup):
    corpus, plan, _ = setup
    lock = threading.Lock()
    state = {"made": 0, "taken": 0, "ahead": 0}

    def transform(batch):
        with lock:
            state["made"] += 1
            state["ahead"] = max(state["ahead"], state["made"] - state["taken"])
        return batch

    loader = Loader(DirectSource(corpus.files), workers=3, depth=4, transform=transform)
    for _ in loader.iterate(plan):
        with lock:
            state["taken"] += 1
    assert state["made"] == len(plan) and state["ahead"] <= 4 + 1
    assert loader.batches == len(plan) and loader.stall_seconds >= 0
