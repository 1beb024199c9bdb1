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
- ``within noise``: the interval includes 0.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from .stats import mean_interval

METHOD = "Student's t, 95 %, over the per-seed paired differences"
IDENTICAL, EXACT, NO_INTERVAL, BETTER, NOISE = "identical", "exact", "no interval", "better", "within noise"
VERDICTS = (EXACT, IDENTICAL, NO_INTERVAL, BETTER, NOISE)  # the rule's order
SEEDS_TO_ADD = 3  # what the re-run command asks for when a comparison had one replicate


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
    Metric("cache_train_hit_pct", True, "%"),
    Metric("data_stall_pct", False, "%"),
    Metric("rows_per_s", True, "rows/s"),
)
THROUGHPUT = tuple(m for m in CACHE_METRICS if m.name in ("data_stall_pct", "rows_per_s"))  # per epoch too


def objective(name: str) -> Metric:
    """``optimized_metric`` as a Metric: accuracies improve upwards, losses downwards (as
    tcgexp.train.metric.higher_is_better says; that layer is above this one)."""
    return Metric(name, name.partition("/")[2].startswith("accuracy"))


def touches_data(key: str) -> bool:
    """A key of the cache or loader group (the option, or one of its knobs): it can change the data path."""
    return key.partition(".")[0] in ("cache", "loader")


def metrics_for(key: str, optimized: Metric) -> list[Metric]:
    return [optimized, *(CACHE_METRICS if touches_data(key) else ())]


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


Cells = dict  # {seed: [value per combination of the other swept keys, in one order]}


def compare(metric: Metric, a: str, a_cells: Cells, b: str, b_cells: Cells) -> dict:
    """`a` against `b` on `metric`, paired over the seeds both have (the cells' common keys), the better
    one named first (``best``) by the paired mean. `difference` is best minus vs in the metric's units,
    `interval` its 95 % interval ([lo, hi]) or None, `n` the seeds behind it."""
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
    elif all(x == y for s in seeds for x, y in zip(a_cells[s], b_cells[s])):
        verdict = IDENTICAL
    elif n < 2:
        verdict = NO_INTERVAL
    else:
        _, half = mean_interval(diffs)
        interval = [diff - half, diff + half]
        verdict = BETTER if interval[0] > 0 or interval[1] < 0 else NOISE
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
    }


def constant(cells: Cells, seeds: Sequence[Hashable]) -> bool:
    """Every combination's value is the same for every seed (bit for bit)."""
    width = len(cells[seeds[0]])
    return all(len({cells[s][i] for s in seeds}) == 1 for i in range(width))


# -- a finding in words: one sentence (the console), summary.md's opening section --------------------------
def fmt(value, unit: str = "", signed: bool = False) -> str:
    """A finding's number as people read it: 4 significant digits, thousands separated, its unit."""
    if value is None:
        return "n/a"
    sign = "+" if signed else ""
    if value == 0:
        text = "0"
    elif abs(value) >= 1000:
        text = f"{value:{sign},.0f}"
    else:
        text = f"{value:{sign}.4g}"
    if not unit:
        return text
    if unit == "%":  # a difference of percentages is in percentage points
        return f"{text} pp" if signed else text + unit
    return f"{text} {unit}"


def interval_text(row: dict) -> str:
    if row["interval"] is None:
        return ""
    lo, hi = row["interval"]
    return f"[{fmt(lo, signed=True)}, {fmt(hi, signed=True)}]"


def what(row: dict) -> str:
    return row.get("key") or row.get("configuration") or ""


def seeds_note(row: dict) -> str:
    """How many seeds stand behind the row, and how many a failed job took away."""
    n = f"{row['n']} seed{'s' if row['n'] != 1 else ''}"
    n += f", {row['removed']} removed by failed jobs" if row.get("removed") else ""
    left = row.get("left_out") or []
    return n + (f"; left out, every job failed: {', '.join(left)}" if left else "")


def sentence(row: dict) -> str:
    """One finding: `best` vs `vs`, the difference (and relative), its interval and n, the verdict."""
    head = f"{what(row)}, {row['metric']}: {row['best']} vs {row['vs']}"
    if row["verdict"] == IDENTICAL:
        return f"{head}: identical, bit for bit ({seeds_note(row)})"
    diff = fmt(row["difference"], row["unit"], signed=True)
    rel = f" ({row['relative_pct']:+.1f} %)" if row.get("relative_pct") is not None and row["unit"] != "%" else ""
    if row["verdict"] == EXACT:
        return f"{head}: {diff}{rel}, exact: the same in every seed ({seeds_note(row)})"
    if row["verdict"] == NO_INTERVAL:
        return f"{head}: {diff}{rel}, no interval ({seeds_note(row) if row['n'] else 'no seed completed both'})"
    return f"{head}: {diff}{rel}, 95 % {interval_text(row)} ({seeds_note(row)}): {row['verdict']}"


HOW_TO_READ = (
    "How to read: each row compares the better option (`best`) with another (`vs`: the runner-up, or the "
    "default) on one metric; `best − vs` is in the metric's units, so its sign follows the metric's direction. "
    f"Seeds are replicates: differences are taken seed by seed and summarised with a 95 % interval ({METHOD}). "
    "Verdicts: `exact`: every seed gave each option the same value (a deterministic counter), so the "
    "difference needs no interval; `identical`: bit-identical values seed by seed (the option cannot change "
    "this metric); "
    "`better`: the interval excludes 0; `within noise`: it includes 0, so the sweep cannot tell the two apart; "
    "`no interval`: one seed, so nothing says whether the difference is more than noise."
)


def markdown(found: list[dict], kind: str, averaged: str = "") -> list[str]:
    """summary.md's findings section: a table (findings.json holds the same rows), then how to read it."""
    lines = ["## Findings", ""]
    if not found:
        return lines + ["No comparison yet: at least two options (configurations) must have completed.", ""]
    head = [
        "key" if kind == "grid" else "configuration",
        "metric",
        "best",
        "vs",
        "best − vs",
        "95 % interval",
        "n (seeds)",
        "verdict",
    ]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in found:
        cells = [
            what(r),
            f"{r['metric']} ({r['direction']})",
            f"{r['best']}: {fmt(r['best_value'], r['unit'])}",
            f"{r['vs']}{' (default)' if r.get('vs_is') == 'default' else ''}: {fmt(r['vs_value'], r['unit'])}",
            fmt(r["difference"], r["unit"], signed=True),
            interval_text(r),
            str(r["n"])
            + (f" ({r['removed']} removed by failed jobs)" if r.get("removed") else "")
            + (f" (left out, every job failed: {', '.join(r['left_out'])})" if r.get("left_out") else ""),
            f"**{r['verdict']}**",
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += ["", HOW_TO_READ + (" " + averaged if averaged else "")]
    rerun = next((r["rerun"] for r in found if r.get("rerun")), None)
    if rerun:
        lines += [
            "",
            f"Some rows have no interval: re-run the sweep with {SEEDS_TO_ADD} seeds (replicates) to get one:",
            "",
            "```bash",
            rerun,
            "```",
        ]
    return lines + [""]
