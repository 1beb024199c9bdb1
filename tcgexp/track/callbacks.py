"""Hydra callbacks for every job and sweep (``conf/hydra/callbacks/``, on by default).

On job end, whether the job succeeded or failed: remove the job's spill dir
(only the spill dirs tcgexp marked, ``tcgexp.ownership``)
and record its status (``job_status.json``), then refresh the sweep report, so
that a sweep whose failed job makes Hydra stop before ``on_multirun_end`` still
leaves a report with every row. On multirun end: the final report.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from ..launch import launched_rank, rank_suffix
from ..ownership import remove_spill_root, spill_root_of
from .summary import write_summary


class SweepReport(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # a local Aim repo, created before any job (parallel jobs then only open it). Not for a resume: its
        # jobs track where their checkpoints' runs live, which the config here does not say yet (its
        # tracking.repo would be the default, ".": an empty .aim/ left in the folder the user ran from);
        # each job's tracker creates its repo under the same lock when it must
        if config.get("tracking") and config.tracking.get("repo") is not None and not config.get("resume"):
            from .aim_run import ensure_repo

            ensure_repo(config.tracking.repo)  # before any job: parallel jobs then only open it

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        job_dir = Path(config.hydra.runtime.output_dir)
        rank = launched_rank()  # each rank of an mlx.launch run removes its own spill, records its own status
        remove_spill_root(spill_root_of(job_dir, rank))  # only what tcgexp made
        error = None
        if job_return.status == JobStatus.FAILED:
            exc = job_return._return_value  # the exception; .return_value would re-raise it
            error = f"{type(exc).__name__}: {exc}"
        status = {"status": job_return.status.name, "error": error, "job_num": config.hydra.job.get("num"),
                  "overrides": list(config.hydra.overrides.task)}
        (job_dir / f"job_status{rank_suffix()}.json").write_text(json.dumps(status, indent=2))
        if config.hydra.mode == RunMode.MULTIRUN and not rank:
            write_summary(Path(config.hydra.sweep.dir))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.exists():
            write_summary(sweep_dir)
