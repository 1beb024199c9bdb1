"""Whole days built in parallel: one day per worker process, the catalog written by the parent.

Days are independent (their own ZIP, shards, Parquet file and manifest), so a
multi-day build hands each missing day to a worker that runs the whole
DayBuilder in-process; the parent only indexes the finished manifests into
the catalog, in date order. A day's bytes never depend on which process built
it or how many there were (the builder is deterministic per day), so the
output equals a one-worker build byte for byte.

Workers are spawned (no inherited locks or threads) and ask the kernel to
kill them when their parent dies (PR_SET_PDEATHSIG on Linux), so a killed
build leaves no orphans; unfinished shards are picked up by the next build.
A parent that dies while a worker is still starting (before its initializer
asked) is caught by comparing the parent pid after asking. Every process pool
of tcgexp is made by ``worker_pool``, so no path forgets the initializer.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from pathlib import Path

from .build import DayBuilder, DayPaths, DaySpec

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> None:
    """Worker initializer: SIGKILL this process when the process that spawned it (pid `parent`) exits."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except OSError:
            pass
    if parent is not None and os.getppid() != parent:  # the parent died before we asked: nobody will tell us
        os._exit(1)


def _start(parent: int, then: Callable[[], object] | None) -> None:
    die_with_parent(parent)
    if then is not None:
        then()


def worker_pool(workers: int, then: Callable[[], object] | None = None) -> ProcessPoolExecutor:
    """Spawned worker processes that die with this one (the only way tcgexp makes a process pool); `then`
    (a module-level function) runs first thing in each, before any task (the real game's dealers load the
    seeded deal there, before the engine)."""
    return ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start, initargs=(os.getpid(), then)
    )


def build_day(game, spec: DaySpec, root: str, fingerprint: str, verify: str) -> tuple[str, dict, list[int]]:
    """One whole day of `game` in this process, without touching the catalog (the parent indexes it)."""
    builder = DayBuilder(spec, DayPaths(Path(root), spec.date), fingerprint, None, game=game, verify=verify)
    outcome, manifest = builder.run()
    return outcome, manifest, builder.encoded


def build_days(
    game,
    specs: Sequence[DaySpec],
    root: Path,
    fingerprints: Sequence[str],
    *,
    workers: int,
    verify: str,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, tuple[str, dict, list[int]]]:
    """{date: (outcome, manifest, encoded shards)} for `specs`, built by up to `workers` processes."""
    report = progress or (lambda stage, done, total: None)
    stage = f"build {len(specs)} days"
    report(stage, 0, len(specs))
    pool = worker_pool(min(workers, len(specs)))
    out: dict[str, tuple[str, dict, list[int]]] = {}
    try:
        futures = {pool.submit(build_day, game, s, str(root), fp, verify): s.date for s, fp in zip(specs, fingerprints)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for fut in done:
                out[futures[fut]] = fut.result()  # the first failure is raised as it is
                report(stage, len(out), len(specs))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return out
