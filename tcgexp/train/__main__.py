"""``tcgexp-train`` / ``python -m tcgexp.train [group=option ...] [key=value ...]``

The task returns the metric ``optimized_metric`` names (``metric.py``), so a sweeper
that optimises (``hydra/sweeper=halving``, ours; optuna, nevergrad, ax) can drive it.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import hydra
from omegaconf import DictConfig

from ..cli import CONFIG_PATH, job_errors, one_line_errors  # registers the --help resolver; config the schemas
from ..rundir import discarded_if_refused
from . import train
from .errors import USER_ERRORS
from .metric import check_metric, optimized
from .rank_status import reports_exit
from .resume import requeued_resume, resume_config


@reports_exit  # under tcgexp-launch: this rank's exit code, for the launcher's own
@one_line_errors(*USER_ERRORS)
@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def main(cfg: DictConfig) -> Optional[float]:
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # one line for the user's errors (a failed sweep job is recorded by Hydra); a run refused before it
    # wrote anything leaves no folder (RunDirGuard created it for this run)
    with job_errors(*USER_ERRORS), discarded_if_refused(run_dir):
        check_metric(cfg.get("optimized_metric"))
        overrides = list(HydraConfig.get().overrides.task)
        if not cfg.resume and (again := requeued_resume(run_dir)):  # SLURM restarted this job: go on
            print(f"[train] requeued job (SLURM_RESTART_COUNT={os.environ['SLURM_RESTART_COUNT']}): continuing "
                  f"from its own checkpoint, resume={again}", file=sys.stderr, flush=True)
            cfg.resume = again
        if cfg.resume:  # the checkpoint's config is the base; this command line's overrides on top, checked
            cfg, overrides = resume_config(cfg, overrides, run_dir)
        result = train(cfg, overrides=overrides)
    return optimized(result, cfg.get("optimized_metric"))


if __name__ == "__main__":
    main()
