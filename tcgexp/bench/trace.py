"""Offline trace replay: run a plan's access trace through a policy, no data.

``python -m tcgexp.bench.trace dataset=5d`` (``tcgexp-replay``: ``tcgexp/cli/replay.py``) prints, for each policy and for
Belady's optimum, the hit rate across capacities (a miss-ratio curve) for the
configured plan, for the planner's grouped lane order and a naive one.

The cache and this replay share ``policy.admit`` and the policy objects
themselves, so for a single consumer reading in plan order (no memory
pressure, no opt-step) the hit count here is the hit count the real cache
gets. That makes it cheap to compare policies and capacities for a plan
before a single row group is decoded.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import field
from typing import ClassVar

from omegaconf import MISSING, DictConfig

from tcgexp.app import option
from tcgexp.bench.belady import belady_hits, flatten
from tcgexp.bench.table import markdown_table
from tcgexp.cache.policy import Policy, admit
from tcgexp.config import build
from tcgexp.data.corpus import DatasetConfig
from tcgexp.data.source import Key, as_key
from tcgexp.plan import LaneIndex
from tcgexp.plan.planner import TbpttConfig
from tcgexp.schema import INT32_MAX, schema, within


@schema(name="base_replay")
class ReplayConfig:
    """``python -m tcgexp.bench.trace``: miss-ratio curves of a configured plan's access trace."""

    dataset: DatasetConfig = MISSING
    tbptt: TbpttConfig = MISSING
    seed: int = 0  # the lane shuffle's seed (tbptt.seed follows it), as in a training run
    epochs: int = 1  # epochs of the plan to replay back to back
    split: str = "train"  # train | val
    capacities: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 6, 8, 12, 16])  # cache sizes: a column each
    policies: list[str] = field(default_factory=lambda: ["fifo", "lru", "hot60", "plan"])  # cache options
    CHECKS: ClassVar[tuple] = (
        ("seed", within(0, 2**32, open_hi=True), "in [0, 2**32)"),
        ("epochs", within(1, 10**4), "in [1, 1e4]"),
        ("capacities", lambda v: all(within(0, INT32_MAX)(c) for c in v), "row-group counts in [0, 2**31)"),
    )


def replay(policy: Policy, trace: Sequence[Iterable[Key]], *, set_trace: bool = True) -> dict[str, int]:
    """Run an access trace through ``policy`` alone (no data): hit/miss counts.

    Mirrors ``RowGroupCache.get`` without memory pressure or spill, so it
    predicts the real cache's hits for a single consumer reading in plan order.
    """
    if set_trace:
        policy.set_trace(trace)
    hits = misses = evictions = bypasses = 0
    for t, keys in enumerate(trace):
        for key in keys:
            key = as_key(key)
            policy.on_access(key, t)
            if key in policy:
                hits += 1
                policy.on_hit(key)
            else:
                misses += 1
                cached, evicted = admit(policy, key)
                evictions += len(evicted)
                bypasses += not cached
    return {
        "hits": hits,
        "misses": misses,
        "evictions": evictions,
        "bypasses": bypasses,
        "promotions": policy.promotions,
    }


def policy_factory(name: str):
    """The residency policy of cache option ``name`` (``conf/cache/<name>.yaml``), as a factory of capacity."""
    return build(option("cache", name).policy)


def miss_ratio_table(
    traces: dict[str, list], capacities: Sequence[int], policies: Sequence[str]
) -> tuple[list[str], list[list]]:
    """Rows of (order, capacity, hit rate per policy, Belady, plan's gap to Belady)."""
    header = ["order", "capacity", *[f"{p} hit %" for p in policies], "Belady hit %", "plan - Belady"]
    factories = {name: policy_factory(name) for name in policies}
    rows = []
    for order, trace in traces.items():
        accesses = flatten(trace)
        n = max(len(accesses), 1)
        for cap in capacities:
            rates = {name: 100.0 * replay(factories[name](cap), trace)["hits"] / n for name in policies}
            best = 100.0 * belady_hits(accesses, cap) / n
            gap = f"{rates['plan'] - best:+.2f}" if "plan" in rates else ""
            rows.append([order, cap, *[f"{rates[p]:.2f}" for p in policies], f"{best:.2f}", gap])
    return header, rows


def replay_report(cfg: DictConfig) -> None:
    t0 = time.perf_counter()
    corpus = build(cfg.dataset)
    corpus.build()
    index = LaneIndex.of(corpus)
    traces, stats = {}, []
    for order in ("grouped", "naive"):
        planner = build(cfg.tbptt, lane_order=order)(index)
        plans = (
            [planner.validation_plan()] if cfg.split == "val" else [planner.epoch_plan(e) for e in range(cfg.epochs)]
        )
        traces[order] = [keys for plan in plans for keys in plan.trace()]
        s = plans[0].stats
        stats.append(
            [
                order,
                s["microbatches"],
                f"{s['mean_lanes']:.1f}",
                f"{s['mean_keys_per_microbatch']:.2f}",
                f"{s['mean_live_row_groups']:.2f}",
                s["max_live_row_groups"],
            ]
        )
    header, rows = miss_ratio_table(traces, list(cfg.capacities), list(cfg.policies))
    print(
        f"## Trace replay: dataset={corpus.name} ({len(index.row_groups)} row groups), "
        f"tbptt.chunk={cfg.tbptt.chunk}, tbptt.batch_size={cfg.tbptt.batch_size}, split={cfg.split}, "
        f"epochs={cfg.epochs}\n"
    )
    print(
        markdown_table(
            ["lane order", "microbatches", "lanes/mb", "row groups/mb", "mean live row groups", "max live row groups"],
            stats,
        )
    )
    print()
    print(markdown_table(header, rows))
    print(f"\n({len(flatten(traces['grouped']))} accesses per order; {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":  # the command is tcgexp/cli/replay.py; run by name, as the packages' __main__ aliases do
    import runpy

    runpy.run_module("tcgexp.cli.replay", run_name="__main__", alter_sys=True)
