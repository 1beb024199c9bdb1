"""``tcgexp-report <sweep dir>`` (or ``python -m tcgexp.report.report``), and a sweep's last lines on the console.

The command rewrites ``findings.json``, ``summary.md``, ``summary.csv`` and ``summary.png`` from what the
sweep dir holds (every job's ``result.json`` and ``job_status.json``, Hydra's ``multirun.yaml``, a halving
sweep's ``trials.json``), then says what the sweep's last lines said: the findings in words, the command
that re-runs the sweep with seeds when a finding has no interval, the Aim link (``aim_link``) and how to
rebuild the report. Any sweep dir, finished, failed or still running (the report is rewritten after every
job). The same lines end a sweep (``SweepReport.on_multirun_end``), and a sweep a failed job stopped as
its process exits.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from pathlib import Path

from ..track.context import swept_keys
from . import multirun, no_findings
from .aim_link import link
from .findings import SEEDS_TO_ADD, Metric, objective
from .summary import (
    FINDINGS,
    SUMMARY,
    Summary,
    grid_params,
    grid_rows,
    halving_rows,
    read_trials,
)
from .unread import case_lines
from .words import confounds, sentence

REBUILD = "tcgexp-report"  # the console script (python -m tcgexp.report.report)


def groups_of(sweep_dir: Path, found: list[dict]) -> int:
    """How many configurations the sweep's runs fall into (Aim's colours): a halving sweep's trials, a
    grid's options of one key times the combinations of the others."""
    trials = read_trials(sweep_dir)
    if trials:
        return len(trials["trials"])
    return max((r["options"] * math.prod(r["averaged_over"].values()) for r in found if "options" in r), default=0)


def keys_of(sweep_dir: Path) -> list[str]:
    """The swept keys (a halving sweep's space, a grid's sweep overrides), seed never among them."""
    trials = read_trials(sweep_dir)
    if trials:
        return [k for k in trials["space"] if k != "seed"]
    return sorted(swept_keys(sweep_dir) or [])


def why_none(sweep_dir: Path, ended: bool = False) -> str:
    """What a sweep without a finding says instead, its jobs read once (``no_findings.why_none``)."""
    trials = read_trials(sweep_dir)
    if trials:
        rows, meta = [], trials["space"]
    else:
        rows = grid_rows(sweep_dir, multirun.load(sweep_dir))
        meta = grid_params(sweep_dir, rows)
    metric = (
        Metric(trials["metric"], trials["direction"] == "maximize")
        if trials
        else objective(multirun.optimized_metric(multirun.load(sweep_dir)))
    )
    return no_findings.why_none(sweep_dir, rows, trials, meta, metric, ended)


def unread(sweep_dir: Path, rows: list[dict] | None = None) -> list[str]:
    """One line per job (trial) the report could not read as it ended (a folder gone, a result.json that does not
    read, a completed run without a finite value), the best trial first, each saying what the findings rest on
    instead (``unread.case_lines``)."""
    trials = read_trials(sweep_dir)
    if rows is None:
        rows = halving_rows(sweep_dir, trials) if trials else grid_rows(sweep_dir, multirun.load(sweep_dir))
    return case_lines(rows, trials)


def lines(sweep_dir: Path, made: Summary | None = None, ended: bool = False) -> list[str]:
    """The sweep's last lines: from the report `made` in memory, or from the files in the sweep dir. `ended`: said
    by the sweep's own process at its end (never "none yet")."""
    sweep_dir = Path(sweep_dir)
    if made is not None:
        found = made.found
    else:
        try:
            found = json.loads((sweep_dir / FINDINGS).read_text())
        except (OSError, ValueError):
            found = None
    out = []
    out += unread(sweep_dir, made.rows if made is not None else None)
    if found is None:
        out.append(f"no {FINDINGS} in {sweep_dir} yet (no job has ended)")
    elif not found:
        out.append(f"findings: {why_none(sweep_dir, ended)}; {sweep_dir / SUMMARY}")
    else:
        out.append(f"findings ({sweep_dir / FINDINGS}; {sweep_dir / SUMMARY} opens with them):")
        out += [f"  {sentence(r)}" for r in found]
        out += [f"  {line}" for line in confounds(found)]
        rerun = next((r["rerun"] for r in found if r.get("rerun")), None)
        if rerun:
            out.append(f"no interval from one seed: re-run the sweep with {SEEDS_TO_ADD} seeds: {rerun}")
    aim = link(sweep_dir, keys_of(sweep_dir), groups_of(sweep_dir, found or []))
    if aim:
        out.append(f"Aim, the runs coloured by what was swept: {aim[0]}, then open {aim[1]}")
    out.append(f"rebuild this report any time: {REBUILD} {shlex.quote(str(sweep_dir))}")
    return out


def say(sweep_dir: Path, made: Summary | None = None, ended: bool = False) -> None:
    for line in lines(sweep_dir, made, ended):
        print(f"[sweep] {line}", file=sys.stderr, flush=True)


def sweeps_below(folder: Path, depth: int = 2, shown: int = 3) -> list[Path]:
    """The newest sweep dirs (a multirun.yaml) up to `depth` levels below `folder` (multirun/ holds
    <date>/<time>/), newest first: what a user who named their parent most likely meant."""
    found = [p.parent for k in range(1, depth + 1) for p in folder.glob("/".join(["*"] * k) + f"/{multirun.NAME}")]
    return sorted(found, key=lambda d: (d / multirun.NAME).stat().st_mtime, reverse=True)[:shown]


if __name__ == "__main__":  # the command is tcgexp/cli/report.py; run by name, as the packages' __main__ aliases do
    import runpy

    runpy.run_module("tcgexp.cli.report", run_name="__main__", alter_sys=True)
