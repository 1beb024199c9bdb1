"""What a sweep without a finding says instead: summary.md's findings section and the console's line.

A grid of seeds alone says what its replicates measured (the objective's mean and its interval: the spread
a difference between two options would have to exceed). Otherwise why there is none, from the jobs' rows:
no job completed; nothing was swept; jobs still running or not started yet ("none yet", and only then:
a sweep that has ended says what it ended with). An option whose every job failed is a finding of its own
(``sweep_findings.failures``), so a grid where jobs failed rarely comes here.
"""

from __future__ import annotations

from pathlib import Path

from ..track.context import swept_keys
from . import multirun
from .findings import Metric
from .stats import mean_interval
from .sweep_findings import value_of
from .words import fmt

DONE = ("COMPLETED", "COMPLETE")
ENDED_WITHOUT_RESULT = ("FAILED", "KILLED", "INTERRUPTED", "MISSING", "DAMAGED", "NAN")
STILL_GOING = ("RUNNING", "WAITING")
NONE_YET = "none yet (two options must complete to be compared)"


def replicates(rows: list[dict], meta: dict, metric: Metric) -> str:
    """A grid that swept no key but `seed` (replicates) compares nothing; what it measured instead: the
    objective's mean over the seeds that completed and its 95 % interval (the spread a difference between
    two options would have to exceed). "" when a key was swept or no job completed."""
    if any(k != "seed" for k in meta) or len({r.get("seed") for r in rows}) < 2:
        return ""
    values = [v for v in (value_of(r, metric.name) for r in rows) if v is not None]
    if not values:
        return ""
    mean, half = mean_interval(values)
    spread = f", 95 % [{fmt(mean - half)}, {fmt(mean + half)}]" if half is not None else " (no interval: one seed)"
    return (
        f"no key was swept, only seed (replicates, never a key), so there is nothing to compare: "
        f"{metric.name} {fmt(mean)}{spread} over {len(values)} seed{'s' if len(values) != 1 else ''}; "
        "sweep a key beside the seeds (cache=off,plan, optimizer.lr=1e-3,3e-3) to compare its options"
    )


def why_none(sweep_dir: Path, rows: list[dict], trials: dict, meta: dict, metric: Metric, ended: bool) -> str:
    """The line for a sweep whose findings are empty. `ended`: the sweep's own process says it is over (its
    end-of-sweep callback); otherwise a job still running, or fewer jobs than the sweep has, is "none yet"."""
    if trials:
        statuses = [str(t["state"]).upper() for t in trials["trials"]]
    else:
        only_seeds = replicates(rows, meta, metric)
        if only_seeds:
            return only_seeds
        # a job the sweep has not reached yet (its row says NOT STARTED) is counted as not started, below
        statuses = [str(r["status"]).upper() for r in rows if str(r["status"]).upper() != "NOT STARTED"]
    done = [s for s in statuses if s in DONE or s.startswith("PRUNED")]
    bad = [s for s in statuses if s in ENDED_WITHOUT_RESULT]
    if statuses and not done and len(bad) == len(statuses):
        return f"none: no job completed ({len(bad)} ended without a result; summary.md lists each error)"
    planned = None if trials else multirun.planned_count(multirun.load(sweep_dir))
    # one job (a preset's sweep fixed on the command line, cache=plan over off,plan, is one too)
    if not trials and (planned == 1 or (not swept_keys(sweep_dir) and len(statuses) == 1)):
        return "none: nothing was swept (one job), so there is nothing to compare"
    going = sum(s in STILL_GOING for s in statuses)
    if going:
        return f"{NONE_YET}: {going} job{'s' if going != 1 else ''} still running"
    if not ended and planned is not None and len(statuses) < planned:
        return f"{NONE_YET}: {len(statuses)} of the sweep's {planned} jobs have started"
    what = "configurations" if trials else "options of a swept key"
    if planned is not None and len(statuses) < planned:
        return (
            f"none: fewer than two {what} completed ({len(done)} of the sweep's {planned} jobs completed; "
            f"{planned - len(statuses)} never started: the sweep was stopped before them)"
        )
    return (
        f"none: fewer than two {what} completed ({len(done)} of {len(statuses)} "
        f"{'trials' if trials else 'jobs'} completed; summary.md lists the others)"
    )
