"""A sweep's findings: which option is better, by how much, and how sure, from results already read; and
the same in words (a sentence each for the console, summary.md's opening section).

Pure statistics, no files. A comparison pairs two options (or two configurations) replicate by
replicate: seeds are replicates in any sweep (``seed=0,1,2`` swept in a grid, ``hydra.sweeper.seeds``
in a halving sweep), never a key. For each seed both completed, the difference of their values
(averaged over the other swept keys' combinations, as a factorial ablation is read); over those
seeds, the mean difference and its 95 % interval (Student's t with n - 1 degrees of freedom, on the
per-seed differences). One rule gives each comparison its verdict, in this order:

- ``exact``: each option gave the same value for every replicate (a deterministic counter: decoded
  MiB, a hit rate), so the difference is exact and needs no interval (two replicates at least show it;
  a difference of 0 when the two options also agree);
- ``identical``: the two options' values are bit-identical in every pair, though they vary from seed
  to seed or there is one seed (val/loss across cache policies: the cache never changes what the
  trainer computes);
- ``no interval``: fewer than two paired replicates of a metric that varies;
- ``better``: the interval excludes 0 (in the metric's good direction: the better option is named first);
- ``within noise``: the interval includes 0; the row then says about how many seeds would resolve a
  difference of the size seen (``seeds_to_resolve``, from the spread of the per-seed differences).

A key with three or more options is placed whole (``sweep_findings.place``): the best against every other
option, the options tied with it bit for bit folded into its name, a metric the same for every option in
one row. An option whose every job failed is a row of its own (``failed``, or ``diverged`` when the
trainer stopped it for non-finite values), ranked below every option that completed.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ..winrate import is_win_rate
from .stats import mean_interval, seeds_to_resolve

METHOD = "Student's t, 95 %, over the per-seed paired differences"
IDENTICAL, EXACT, NO_INTERVAL, BETTER, NOISE = "identical", "exact", "no interval", "better", "within noise"
FAILED, DIVERGED = "failed", "diverged"  # an option none of whose jobs completed (not a comparison)
VERDICTS = (EXACT, IDENTICAL, NO_INTERVAL, BETTER, NOISE, DIVERGED, FAILED)  # the rule's order, then the failures
SEEDS_TO_ADD = 3  # what the re-run command asks for when a comparison had one replicate
MOST_SEEDS = 1000  # past this many seeds "about how many would resolve it" is said as "more than"
INTERLEAVED = "hydra/sweeper=interleaved"  # runs seed 0 of every option, then seed 1, ...: job order is no bias


@dataclass(frozen=True)
class Metric:
    """A metric a finding compares: its name (``optimized_metric``, or a summary.csv column), which way is
    better, its unit."""

    name: str
    higher: bool
    unit: str = ""

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher else "lower is better"


# what a cache or loader key can change besides the objective (summary.csv's columns: the train cache)
CACHE_METRICS = (
    Metric("cache_train_mib_decoded", False, "MiB"),
    Metric("cache_train_mib_moved", False, "MiB"),  # decoded and read back from the spill: every byte it read
    Metric("cache_train_hit_pct", True, "%"),
    Metric("data_stall_pct", False, "%"),
    Metric("rows_per_s", True, "rows/s"),
)
THROUGHPUT = tuple(m for m in CACHE_METRICS if m.name in ("data_stall_pct", "rows_per_s"))  # per epoch too


def objective(name: str) -> Metric:
    """``optimized_metric`` as a Metric: accuracies improve upwards, losses downwards (as
    tcgexp.train.metric.higher_is_better says; that layer is above this one)."""
    return Metric(name, name.partition("/")[2].startswith("accuracy") or is_win_rate(name))


def touches_data(key: str) -> bool:
    """A key of the cache or loader group (the option, or one of its knobs): it can change the data path."""
    return key.partition(".")[0] in ("cache", "loader")


def metrics_for(key: str, optimized: Metric) -> list[Metric]:
    return [optimized, *(CACHE_METRICS if touches_data(key) else ())]


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


Cells = dict  # {seed: [value per combination of the other swept keys, in one order]}


def compare(metric: Metric, a: str, a_cells: Cells, b: str, b_cells: Cells, *, same_policy: bool = False) -> dict:
    """`a` against `b` on `metric`, paired over the seeds both have (the cells' common keys), the better
    one named first (``best``) by the paired mean. `difference` is best minus vs in the metric's units,
    `interval` its 95 % interval ([lo, hi]) or None, `n` the seeds behind it.

    `same_policy`: the metric is a policy's result in games (a win rate) and both options trained bit-identical
    weights in every seed: one policy, so ``identical`` whatever the games' own luck made of it (the engine
    shuffles on its own unless the deals are paired), never an effect; the row says so (``same_policy``)."""
    seeds = [s for s in a_cells if s in b_cells]
    if not seeds:
        return {
            "metric": metric.name,
            "direction": metric.direction,
            "unit": metric.unit,
            "best": a,
            "vs": b,
            "best_value": None,
            "vs_value": None,
            "difference": None,
            "relative_pct": None,
            "interval": None,
            "n": 0,
            "verdict": NO_INTERVAL,
        }
    diffs = [_mean(a_cells[s]) - _mean(b_cells[s]) for s in seeds]
    if (_mean(diffs) < 0) == metric.higher and _mean(diffs) != 0:  # the paired evidence names the better one
        a, a_cells, b, b_cells = b, b_cells, a, a_cells
        diffs = [-d for d in diffs]
    diff = _mean(diffs)
    best_value = _mean([_mean(a_cells[s]) for s in seeds])
    vs_value = _mean([_mean(b_cells[s]) for s in seeds])
    n, interval = len(seeds), None
    if n >= 2 and all(constant(cells, seeds) for cells in (a_cells, b_cells)):
        verdict = EXACT
    elif all(x == y for s in seeds for x, y in zip(a_cells[s], b_cells[s])) or same_policy:
        verdict = IDENTICAL
    elif n < 2:
        verdict = NO_INTERVAL
    else:
        _, half = mean_interval(diffs)
        interval = [diff - half, diff + half]
        verdict = BETTER if interval[0] > 0 or interval[1] < 0 else NOISE
    more = {"seeds_to_resolve": seeds_to_resolve(diffs, MOST_SEEDS)} if verdict == NOISE else {}
    return {
        "metric": metric.name,
        "direction": metric.direction,
        "unit": metric.unit,
        "best": a,
        "vs": b,
        "best_value": best_value,
        "vs_value": vs_value,
        "difference": diff,
        "relative_pct": 100 * diff / abs(vs_value) if vs_value else None,
        "interval": interval,
        "n": n,
        "verdict": verdict,
        **more,
        **({"same_policy": True} if same_policy and verdict == IDENTICAL else {}),
    }


def constant(cells: Cells, seeds: Sequence[Hashable]) -> bool:
    """Every combination's value is the same for every seed (bit for bit)."""
    width = len(cells[seeds[0]])
    return all(len({cells[s][i] for s in seeds}) == 1 for i in range(width))
