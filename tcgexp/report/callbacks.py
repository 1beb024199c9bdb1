"""Hydra callbacks for every job and sweep (``conf/hydra/callbacks/``, on by default).

On job end, whether the job succeeded or failed: remove the job's spill dir
(only the spill dirs tcgexp marked, ``tcgexp.ownership``)
and record its status (``job_status.json``), then refresh the sweep report, so
that a sweep whose failed job makes Hydra stop before ``on_multirun_end`` still
leaves a report with every row and its findings. On multirun end: the final report,
and its findings on the console (``report``); a sweep stopped before it (a failed job, Ctrl-C)
says them as its process exits.
"""

from __future__ import annotations

import atexit
import json
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from ..launch import launched_rank, rank_suffix
from ..ownership import HeldLock, remove_spill_root, spill_root_of
from ..track.aim_repo import ensure_repo
from . import multirun
from .jobs import JOB_STATUS
from .report import say
from .summary import FINDINGS, SWEEP_LOCK, write_summary


class SweepReport(Callback):
    ended = False
    started = 0.0  # when this command's multirun began (on_multirun_start)

    lock: HeldLock | None = None  # the sweep's hold on its folder while it runs (the report tells "not started yet")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.started = time.time()
        sweep_dir = Path(config.hydra.sweep.dir)
        # while this sweep runs, a job without a folder is one not started yet; after it, one deleted. The halving
        # sweeper holds the same lock itself (tcgexp.sweep.identity.hold)
        if multirun.get(config, "hydra.sweeper._target_") != multirun.HALVING and sweep_dir.is_dir():
            try:
                lock = HeldLock(sweep_dir / SWEEP_LOCK, "sweep")
                if lock.acquire() is None:
                    self.lock = lock
                    atexit.register(lock.release)
            except OSError:  # a read-only sweep folder: its report says what it can
                pass
        # Hydra's basic sweeper raises a failed job's error before on_multirun_end: the findings so far
        # are then said as this process exits (after the error's line), from the report the jobs left
        atexit.register(self.say_if_stopped, Path(config.hydra.sweep.dir))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        # a local Aim repo, made before the job's tracker opens it, under the repo's init lock (parallel jobs: one
        # makes it, the others wait and open it); here, not when the sweep starts, so a sweep refused before its
        # first job leaves no .aim/ behind. Not for a resume: its jobs track where their checkpoints' runs live,
        # which the config here does not say yet (its tracking.repo would be the default, ".": an empty .aim/ left
        # in the folder the user ran from); each job's tracker creates its repo under the same lock when it must
        repo = config.tracking.get("repo") if config.get("tracking") else None
        if repo is not None and not config.get("resume") and not (Path(str(repo)) / ".aim").exists():
            ensure_repo(repo)  # (one there, even a damaged one, is the tracker's to open and to say)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        job_dir = Path(config.hydra.runtime.output_dir)
        rank = launched_rank()  # each rank of an mlx.launch run removes its own spill, records its own status
        remove_spill_root(spill_root_of(job_dir, rank))  # only what tcgexp made
        error = None
        if job_return.status == JobStatus.FAILED:
            exc = job_return._return_value  # the exception; .return_value would re-raise it
            error = f"{type(exc).__name__}: {exc}"
        status = {
            "status": job_return.status.name,
            "error": error,
            "job_num": config.hydra.job.get("num"),
            "overrides": list(config.hydra.overrides.task),
        }
        (job_dir / f"{Path(JOB_STATUS).stem}{rank_suffix()}.json").write_text(json.dumps(status, indent=2))
        if config.hydra.mode == RunMode.MULTIRUN and not rank:
            write_summary(Path(config.hydra.sweep.dir))

    def reported_since_start(self, sweep_dir: Path) -> bool:
        try:
            return (sweep_dir / FINDINGS).stat().st_mtime >= self.started
        except OSError:
            return False

    def say_if_stopped(self, sweep_dir: Path) -> None:
        if not self.ended and self.reported_since_start(sweep_dir):  # not a refusal before any job
            write_summary(sweep_dir, ended=True)  # over: its report says what it ended with, never "none yet"
            say(sweep_dir, ended=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.ended = True
        if self.lock is not None:
            self.lock.release()
        sweep_dir = Path(config.hydra.sweep.dir)
        if sys.exc_info()[1] is not None and not self.reported_since_start(sweep_dir):
            return  # refused before any job of this command ended: its error is the answer, not an earlier report
        if sweep_dir.exists():
            write_summary(sweep_dir, ended=True)
            say(sweep_dir, ended=True)
