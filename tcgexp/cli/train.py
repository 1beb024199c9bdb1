"""``tcgexp-train`` / ``python -m tcgexp.train [group=option ...] [key=value ...]``

The task returns the metric ``optimized_metric`` names (``metric.py``), so a sweeper
that optimises (``hydra/sweeper=halving``, ours; optuna, nevergrad, ax) can drive it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig

from ..app import compose, hydra_main
from ..console import job_errors
from ..launch import launched_rank
from ..learn.blas import setup
from ..lifecycle.rank_status import reports_exit
from ..lifecycle.rundir import claimed, requeued_resume, run_dir_of
from ..overrides import shell_override
from ..train.errors import USER_ERRORS
from ..train.metric import check_metric, optimized


@reports_exit  # under tcgexp-launch: this rank's exit code, for the launcher's own
@hydra_main("config", *USER_ERRORS)
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    # a launcher's worker (joblib, Ray, SLURM) runs this function without the command's start: MKL first, then
    # what imports MLX (the resume's checkpoint reader, the run), which binds its BLAS when it loads
    setup()
    from ..lifecycle.resume import resume_config
    from ..train.run import train

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    again = None if cfg.resume else requeued_resume(run_dir)  # SLURM restarted this job: it goes on
    # one line for the user's errors (a failed sweep job is recorded by Hydra); the folder's claim (RunDirGuard's,
    # taken over): a run refused before it wrote anything leaves no folder
    with job_errors(*USER_ERRORS), claimed(run_dir, rank=launched_rank(), continues=run_dir_of(cfg.resume or again)):
        check_metric(cfg.get("optimized_metric"), cfg)
        overrides = list(HydraConfig.get().overrides.task)
        if again:
            print(
                f"[train] requeued job (SLURM_RESTART_COUNT={os.environ['SLURM_RESTART_COUNT']}): continuing "
                f"from its own checkpoint, {shell_override('resume', str(again))}",
                file=sys.stderr,
                flush=True,
            )
            cfg.resume = again
        if cfg.resume:  # the checkpoint's config is the base; this command line's overrides on top, checked
            cfg, overrides = resume_config(cfg, overrides, compose, run_dir)
        result = train(cfg, overrides=overrides)
    return optimized(result, cfg.get("optimized_metric"))


if __name__ == "__main__":
    main()
