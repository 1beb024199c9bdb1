"""What tracking costs a daily sequence's phase: the same sequence untracked, tracked (one Aim process for every
phase, as ``tcgexp-sequence`` runs it), and tracked with an Aim process per phase (what a run alone pays).

    tcgexp-bench sequence                            # 3 days of the built-in game, 2 rounds, arms alternated
    tcgexp-bench sequence --days 3 --rounds 3 --busy # with a CPU-bound process beside it the whole time

Each arm is the real command (``python -m tcgexp.cli.sequence``) from an empty sequence folder on a corpus built
once before (so no arm pays the build); arms alternate within a round. Printed per arm: each round's wall, its
median, and the median's excess over the untracked arm per phase (a sequence of N days tracks N phase runs and
its own). The arms' canonical weights are checked equal (tracking never changes what is trained). Goal: at most
1 s of wall per phase (issue 49).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .table import markdown_table

ARMS = {
    "untracked": ["tracking=off"],
    "Aim, one process (the sequence's)": ["tracking=aim"],
    "Aim, a process per phase": ["tracking=aim", "tracking.keep_process=false"],
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--days", type=int, default=3, help="phases (days from 2026-07-27)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rows-per-day", type=int, default=3000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--busy", action="store_true", help="a CPU-bound process beside every arm")
    p.add_argument("--out", default=None, help="keep the sequences here (default: a temporary folder)")


def spin(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


@contextlib.contextmanager
def busy(on: bool):
    if not on:
        yield
        return
    stop = multiprocessing.Event()
    proc = multiprocessing.Process(target=spin, args=(stop,), daemon=True)
    proc.start()
    try:
        yield
    finally:
        stop.set()
        proc.join(5)


def command(args, out: Path, folder: str, extra: list[str]) -> list[str]:
    first = dt.date(2026, 7, 27)
    days = ",".join((first + dt.timedelta(days=i)).isoformat() for i in range(args.days))
    return [
        sys.executable,
        "-m",
        "tcgexp.cli.sequence",
        f"sequence.days=[{days}]",
        f"sequence.folder={out / folder}",
        f"dataset.root={out / 'data'}",
        f"dataset.rows_per_day={args.rows_per_day}",
        f"trainer.epochs={args.epochs}",
        *([f"tracking.repo={out / 'aim'}"] if "tracking=aim" in extra else []),
        *extra,
    ]


def one(args, out: Path, folder: str, extra: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(command(args, out, folder, extra), capture_output=True, text=True, cwd=out)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"bench sequence: {folder} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    weights = (out / folder / "canonical" / "model.safetensors").read_bytes()
    return wall, hashlib.sha256(weights).hexdigest()


def run(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp).absolute()
        out.mkdir(parents=True, exist_ok=True)
        one(args, out, "warm-up", ["tracking=off"])  # the corpus built, the kernels compiled: no arm pays them
        walls: dict[str, list[float]] = {a: [] for a in ARMS}
        shas = set()
        with busy(args.busy):
            for r in range(args.rounds):
                for i, (arm, extra) in enumerate(ARMS.items()):
                    wall, sha = one(args, out, f"r{r}-{i}", extra)
                    walls[arm].append(wall)
                    shas.add(sha)
                    print(f"[bench sequence] round {r + 1}, {arm}: {wall:.2f} s", file=sys.stderr, flush=True)
        if len(shas) != 1:
            raise SystemExit(f"bench sequence: the arms trained different canonical weights ({len(shas)} distinct)")
        base = statistics.median(walls["untracked"])
        rows = []
        for arm, w in walls.items():
            med = statistics.median(w)
            rows.append(
                [
                    arm,
                    ", ".join(f"{x:.2f}" for x in w),
                    f"{med:.2f}",
                    "-" if arm == "untracked" else f"{(med - base) / args.days:+.2f}",
                ]
            )
        print(
            f"{args.days}-day sequence of the built-in game ({args.rows_per_day} rows a day, {args.epochs} "
            f"epoch(s) a phase), {args.rounds} round(s), arms alternated"
            + (", a CPU-bound process beside it" if args.busy else "")
            + "; canonical weights equal in every arm"
        )
        print(markdown_table(["arm", "wall per round (s)", "median (s)", "tracking per phase (s)"], rows))
