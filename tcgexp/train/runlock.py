"""One run per run folder: ``<run dir>/.tcgexp-run.lock``, held (flock) for the run's life.

Why: two trainings pointed at the same folder (a repeated ``hydra.run.dir``,
two array tasks with one output path) wrote the same ``checkpoints/.latest.tmp``
and the same spill dir; the loser failed with a misleading "free disk space".
Now the second is refused at once, naming the holder (pid, host, start time,
written in the lock file). The kernel drops the lock when its run dies, so a
killed run never blocks the next one, and the file is kept (see
``ownership.HeldLock``).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from ..config import ConfigError
from ..ownership import HeldLock, describe, read_info

LOCK_NAME = ".tcgexp-run.lock"


class RunDirBusy(ConfigError):
    """Another live run holds this run folder (a ConfigError: printed as one line by every entry point)."""


def busy(run_dir: Path, holder: dict | None = None, name: str = LOCK_NAME) -> RunDirBusy:
    holder = holder if holder is not None else read_info(Path(run_dir) / name)
    return RunDirBusy(f"run dir {run_dir} is in use by another run ({describe(holder)}); give this run its "
                      "own folder (hydra.run.dir=...), or wait for that one to end")


@contextlib.contextmanager
def hold_run_dir(run_dir: Path, name: str = LOCK_NAME) -> Iterator[None]:
    """`name`: rank r > 0 of a distributed run holds its own lock in rank 0's run dir."""
    lock = HeldLock(Path(run_dir) / name, "run")
    try:
        holder = lock.acquire()
    except OSError as exc:  # a read-only or foreign folder: say which, before any work
        raise ConfigError(f"run dir {run_dir} cannot be written ({exc.strerror or exc}); point hydra.run.dir "
                          "(or run_dir=) at a folder you can write") from exc
    if holder is not None:
        raise busy(run_dir, holder)
    try:
        yield
    finally:
        lock.release()
