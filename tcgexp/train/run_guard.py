"""``RunDirGuard``: the train app's Hydra callback that claims the run dir, or the sweep dir, first.

Hydra calls ``on_run_start`` / ``on_multirun_start`` after composing and before ``run_job`` (or the
sweeper) creates the folder and writes ``.hydra/`` and the job log, so a folder refused here is left
exactly as it was (``rundir.py`` says which folders are tcgexp's and claims them). Hydra turns a callback's
``Exception`` into a warning, so a refusal leaves as ``RunDirRefused``, a ``SystemExit`` with the
one line (``--verbose`` prints the traceback first). On by default:
``conf/hydra/callbacks/run_dir_guard.yaml``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ..console import flatten, verbose
from ..errors import ConfigError
from ..launch import launched_rank
from ..lifecycle.ckpt_files import requeued_resume
from ..lifecycle.rundir import SWEEP_MARKER, check, check_job_dirs, claim, mark, run_dir_of
from ..plugins import check_launcher
from .errors import USER_ERRORS


class RunDirRefused(SystemExit):
    """A refusal from a Hydra callback: exits with its line."""


def refused(exc: Exception) -> RunDirRefused:
    if verbose():
        import traceback

        traceback.print_exception(exc)
    return RunDirRefused(f"error: {flatten(exc)}")


class RunDirGuard(Callback):
    """Claims the run dir, or the sweep dir, after composition and before Hydra writes anything."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir = Path(str(OmegaConf.select(config, "hydra.run.dir"))).expanduser().absolute()
        # the run this one continues (resume=, a SLURM requeue of this folder's job): only its outputs may be there
        continues = run_dir_of(OmegaConf.select(config, "resume", default=None) or requeued_resume(run_dir))
        try:  # checked, marked and locked (the run takes the claim over): a live run's folder is refused here,
            claim(run_dir, rank=launched_rank(), hydra_made=False, continues=continues)  # before Hydra writes
        except USER_ERRORS as exc:  # (a checkpoint folder it would replace that holds what is not ours, too)
            raise refused(exc) from None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(str(OmegaConf.select(config, "hydra.sweep.dir"))).expanduser().absolute()
        try:
            check_launcher(config)  # a launcher that cannot start here: refused before anything is written
            check(sweep, "hydra.sweep.dir", SWEEP_MARKER, hydra_made=False)
            check_job_dirs(sweep)
            mark(sweep, "hydra.sweep.dir", SWEEP_MARKER, hydra_made=False)
        except ConfigError as exc:
            raise refused(exc) from None
