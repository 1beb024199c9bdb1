"""``tcgexp-report <sweep dir>``: rebuild a sweep dir's report (findings.json, summary.md, summary.csv,
summary.png) from what its jobs left, and print its findings (``tcgexp.report``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..console import one_line_errors
from ..report import multirun
from ..report.report import say, sweeps_below
from ..report.summary import SUMMARY, job_dirs, read_trials, summarize, write_atomic


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
        print(made.files[SUMMARY].decode(), flush=True)
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
