"""``tcgexp-report <sweep dir>`` (or ``python -m tcgexp.track.report``), and a sweep's last lines on the console.

The command rewrites ``findings.json``, ``summary.md``, ``summary.csv`` and ``summary.png`` from what the
sweep dir holds (every job's ``result.json`` and ``job_status.json``, Hydra's ``multirun.yaml``, a halving
sweep's ``trials.json``), then says what the sweep's last lines said: the findings in words, the command
that re-runs the sweep with seeds when a finding has no interval, the Aim link (``aim_link``) and how to
rebuild the report. Any sweep dir, finished, failed or still running (the report is rewritten after every
job). The same lines end a sweep (``SweepReport.on_multirun_end``), and a sweep a failed job stopped as
its process exits.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

from ..console import one_line_errors
from . import multirun, no_findings
from .aim_link import link
from .context import swept_keys
from .findings import SEEDS_TO_ADD, Metric, objective
from .summary import (
    Summary,
    grid_params,
    grid_rows,
    halving_rows,
    job_dirs,
    read_trials,
    summarize,
    unreadable_rows,
    write_atomic,
)
from .words import confounds, sentence

REBUILD = "tcgexp-report"  # the console script (python -m tcgexp.track.report)


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


def unread(sweep_dir: Path, rows: list[dict] | None = None) -> str | None:
    """The line naming the jobs (trials) the report could not read as they are (a folder gone, a result.json
    that does not read, a completed run without a finite value), the best trial first when it is one; or None."""
    trials = read_trials(sweep_dir)
    if rows is None:
        rows = halving_rows(sweep_dir, trials) if trials else grid_rows(sweep_dir, multirun.load(sweep_dir))
    bad = unreadable_rows(rows)
    if not bad:
        return None
    what = "trial" if trials else "job"
    bad.sort(key=lambda r: not r.get("best"))
    shown = "; ".join(
        f"{'the best, ' if r.get('best') else ''}{what} {r['job']}, {r['status'].lower()}: {r['error']}"
        for r in bad[:3]
    )
    more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
    return f"{len(bad)} {what}(s) cannot be read as they ended, none counted as completed: {shown}{more}"


def lines(sweep_dir: Path, made: Summary | None = None, ended: bool = False) -> list[str]:
    """The sweep's last lines: from the report `made` in memory, or from the files in the sweep dir. `ended`: said
    by the sweep's own process at its end (never "none yet")."""
    sweep_dir = Path(sweep_dir)
    if made is not None:
        found = made.found
    else:
        try:
            found = json.loads((sweep_dir / "findings.json").read_text())
        except (OSError, ValueError):
            found = None
    out = []
    damaged = unread(sweep_dir, made.rows if made is not None else None)
    if damaged:
        out.append(damaged)
    if found is None:
        out.append(f"no findings.json in {sweep_dir} yet (no job has ended)")
    elif not found:
        out.append(f"findings: {why_none(sweep_dir, ended)}; {sweep_dir / 'summary.md'}")
    else:
        out.append(f"findings ({sweep_dir / 'findings.json'}; {sweep_dir / 'summary.md'} opens with them):")
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
    found = [p.parent for k in range(1, depth + 1) for p in folder.glob("/".join(["*"] * k) + "/multirun.yaml")]
    return sorted(found, key=lambda d: (d / "multirun.yaml").stat().st_mtime, reverse=True)[:shown]


@one_line_errors(FileNotFoundError)
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="tcgexp-report", description=__doc__.split("\n")[0])
    p.add_argument("sweep_dir", help="a sweep's folder (hydra.sweep.dir: multirun/<date>/<time>, ...)")
    args = p.parse_args(argv)
    sweep_dir = Path(args.sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"{sweep_dir}: no such folder (give a sweep's hydra.sweep.dir)")
    if not read_trials(sweep_dir) and not job_dirs(sweep_dir) and not multirun.planned_jobs(multirun.load(sweep_dir)):
        below = sweeps_below(sweep_dir)
        hint = (
            f"; the newest sweeps below it: {', '.join(str(d) for d in below)}"
            if below
            else "; give the folder a --multirun wrote (hydra.sweep.dir)"
        )
        raise FileNotFoundError(f"{sweep_dir}: not a sweep dir (no job folders 0, 1, ... and no trials.json){hint}")
    made = summarize(sweep_dir)
    try:
        for name, data in made.files.items():
            write_atomic(sweep_dir / name, data)
    except OSError as exc:  # a read-only sweep folder (a finished sweep on a shared mount): the report on the console
        print(made.files["summary.md"].decode(), flush=True)
        say(sweep_dir, made)
        print(
            f"[sweep] the report's files were not written into {sweep_dir} ({exc.strerror or exc}): summary.md is "
            "printed above; give tcgexp-report a folder it can write (a copy of the sweep dir) for the files",
            file=sys.stderr,
            flush=True,
        )
        return
    say(sweep_dir, made)


if __name__ == "__main__":
    main()
