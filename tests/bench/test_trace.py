"""The offline replay tool and the independent Belady optimum it checks `plan` against."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tcgexp.bench.belady import belady_hits, flatten
from tcgexp.bench.trace import miss_ratio_table, replay
from tcgexp.plan import LaneIndex
from tests.conftest import make_corpus, planner_of, policy_of


def brute_force_best(accesses, capacity):
    """Max hits over every eviction/bypass choice (exponential: tiny traces only)."""
    best = 0

    def go(i, resident, hits):
        nonlocal best
        if i == len(accesses):
            best = max(best, hits)
            return
        key = accesses[i]
        if key in resident:
            go(i + 1, resident, hits + 1)
            return
        if len(resident) < capacity:
            go(i + 1, resident | {key}, hits)
        go(i + 1, resident, hits)  # bypass
        for victim in resident:
            go(i + 1, (resident - {victim}) | {key}, hits)

    go(0, frozenset(), 0)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_belady_is_optimal_on_small_random_traces(seed):
    rng = np.random.default_rng(seed)
    accesses = [int(k) for k in rng.integers(0, 5, size=11)]
    for capacity in (1, 2, 3):
        assert belady_hits(accesses, capacity) == brute_force_best(accesses, capacity)


def test_belady_edge_cases():
    assert belady_hits([], 3) == 0
    assert belady_hits([1, 1, 1], 0) == 0
    assert belady_hits([1, 2, 1, 2], 2) == 2


@pytest.fixture(scope="module")
def plan_traces(tmp_path_factory):
    corpus = make_corpus(
        tmp_path_factory.mktemp("replay") / "data",
        "dataset.days=2",
        "dataset.rows_per_day=3000",
        "dataset.row_group_rows=256",
        build_now=True,
    )
    index = LaneIndex(corpus.files, [corpus.manifests[d] for d in corpus.dates])
    out = {}
    for order in ("grouped", "naive"):
        planner = planner_of(index, chunk=8, batch_size=128, seed=0, lane_order=order)
        out[order] = [k for e in range(2) for k in planner.epoch_plan(e).trace()]
    return out


@pytest.mark.parametrize("capacity", [1, 2, 3, 4, 6, 8, 12])
def test_plan_policy_within_one_percent_of_belady_on_real_plans(plan_traces, capacity):
    for order, trace in plan_traces.items():
        accesses = flatten(trace)
        plan_hits = replay(policy_of("plan", capacity), trace)["hits"]
        best = belady_hits(accesses, capacity)
        assert plan_hits <= best
        assert best - plan_hits <= 0.01 * len(accesses), (order, capacity, plan_hits, best)


def test_grouped_order_needs_far_less_cache_than_naive(plan_traces):
    for capacity in (2, 4):
        g = belady_hits(flatten(plan_traces["grouped"]), capacity) / len(flatten(plan_traces["grouped"]))
        n = belady_hits(flatten(plan_traces["naive"]), capacity) / len(flatten(plan_traces["naive"]))
        assert g > n + 0.2


def test_miss_ratio_table_rows(plan_traces):
    header, rows = miss_ratio_table(plan_traces, [1, 4], ["fifo", "lru", "hot60", "plan"])
    assert header[-2:] == ["Belady hit %", "plan - Belady"] and len(rows) == 4
    for row in rows:
        assert abs(float(row[-1])) <= 1.0


def test_replay_command_prints_the_table(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.bench.trace",
            f"dataset.root={tmp_path}",
            "dataset.rows_per_day=1500",
            "dataset.row_group_rows=256",
            "capacities=[1,2,4]",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "| order   | capacity | fifo hit % | lru hit % | hot60 hit % | plan hit % | Belady hit %" in res.stdout
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(("| grouped ", "| naive "))]
    assert len([ln for ln in lines if ln.count("|") == 9]) == 6
    assert "RuntimeWarning" not in res.stderr
