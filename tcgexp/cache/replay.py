"""Offline trace replay: run a plan's access trace through a policy, no data.

``python -m tcgexp.cache.replay dataset=5d`` prints, for each policy and for
Belady's optimum, the hit rate across capacities (a miss-ratio curve) for the
configured plan, for the planner's grouped lane order and a naive one.

The cache and this replay share ``policy.admit`` and the policy objects
themselves, so for a single consumer reading in plan order (no memory
pressure, no opt-step) the hit count here is the hit count the real cache
gets. That makes it cheap to compare policies and capacities for a plan
before a single row group is decoded.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import hydra
from omegaconf import DictConfig

from tcgexp.cache.policy import Key, Policy, _norm_key, admit
from tcgexp.cli import CONFIG_PATH  # registers the --help resolver (and, through config, the schemas)


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
            key = _norm_key(key)
            policy.on_access(key, t)
            if key in policy:
                hits += 1
                policy.on_hit(key)
            else:
                misses += 1
                cached, evicted = admit(policy, key)
                evictions += len(evicted)
                bypasses += not cached
    return {"hits": hits, "misses": misses, "evictions": evictions, "bypasses": bypasses,
            "promotions": policy.promotions}


def miss_ratio_table(traces: dict[str, list], capacities: Sequence[int], policies: Sequence[str], *,
                     hot_fraction: float, promotion_hits: int) -> tuple[list[str], list[list]]:
    """Rows of (order, capacity, hit rate per policy, Belady, plan's gap to Belady)."""
    from tcgexp.cache.belady import belady_hits, flatten
    from tcgexp.cache.policy import make_policy

    header = ["order", "capacity", *[f"{p} hit %" for p in policies], "Belady hit %", "plan - Belady"]
    rows = []
    for order, trace in traces.items():
        accesses = flatten(trace)
        n = max(len(accesses), 1)
        for cap in capacities:
            rates = {}
            for name in policies:
                policy = make_policy(name, cap, hot_fraction=hot_fraction, promotion_hits=promotion_hits)
                rates[name] = 100.0 * replay(policy, trace)["hits"] / n
            best = 100.0 * belady_hits(accesses, cap) / n
            gap = f"{rates['plan'] - best:+.2f}" if "plan" in rates else ""
            rows.append([order, cap, *[f"{rates[p]:.2f}" for p in policies], f"{best:.2f}", gap])
    return header, rows


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="replay")
def main(cfg: DictConfig) -> None:
    """``tcgexp-replay`` / ``python -m tcgexp.cache.replay [key=value ...]``: the miss-ratio tables."""
    import time

    from tcgexp.bench.table import markdown_table
    from tcgexp.cache.belady import flatten
    from tcgexp.config import build
    from tcgexp.plan import LaneIndex, Planner

    t0 = time.perf_counter()
    corpus = build(cfg.dataset)
    corpus.build()
    index = LaneIndex(corpus.files, [corpus.manifests[d] for d in corpus.dates])
    traces, stats = {}, []
    for order in ("grouped", "naive"):
        planner = Planner(index, chunk=cfg.tbptt.chunk, batch_size=cfg.tbptt.batch_size, seed=cfg.seed,
                          enabled=cfg.tbptt.enabled, order=order)
        plans = ([planner.validation_plan()] if cfg.split == "val"
                 else [planner.epoch_plan(e) for e in range(cfg.epochs)])
        traces[order] = [keys for plan in plans for keys in plan.trace()]
        s = plans[0].stats
        stats.append([order, s["microbatches"], f"{s['mean_lanes']:.1f}", f"{s['mean_keys_per_microbatch']:.2f}",
                      f"{s['mean_live_row_groups']:.2f}", s["max_live_row_groups"]])
    header, rows = miss_ratio_table(traces, list(cfg.capacities), list(cfg.policies),
                                    hot_fraction=cfg.hot_fraction, promotion_hits=cfg.promotion_hits)
    n_rg = len(index.row_groups)
    print(f"## Trace replay: dataset={corpus.name} ({n_rg} row groups), tbptt.chunk={cfg.tbptt.chunk}, "
          f"tbptt.batch_size={cfg.tbptt.batch_size}, split={cfg.split}, epochs={cfg.epochs}\n")
    print(markdown_table(["lane order", "microbatches", "lanes/mb", "row groups/mb", "mean live row groups",
                          "max live row groups"], stats))
    print()
    print(markdown_table(header, rows))
    print(f"\n({len(flatten(traces['grouped']))} accesses per order; {time.perf_counter() - t0:.1f} s)")

if __name__ == "__main__":
    main()
