"""``RunDirGuard``: the train app's Hydra callback that claims the run dir, or the sweep dir, first.

Hydra calls ``on_run_start`` / ``on_multirun_start`` after composing and before ``run_job`` (or the
sweeper) creates the folder and writes ``.hydra/`` and the job log, so a folder refused here is left
exactly as it was (``tcgexp.rundir`` says which folders are tcgexp's). Hydra turns a callback's
``Exception`` into a warning, so a refusal leaves as ``RunDirRefused``, a ``SystemExit`` with the
one line (``--verbose`` prints the traceback first). On by default:
``conf/hydra/callbacks/run_dir_guard.yaml``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ..config import ConfigError
from ..launch import launched_rank
from ..ownership import held_by_someone
from ..plugins import check_launcher
from ..rundir import SWEEP_MARKER, check, check_job_dirs, claim
from .distributed import rank_lock_name
from .runlock import busy


class RunDirRefused(SystemExit):
    """A refusal from a Hydra callback: exits with its line."""


def refused(exc: ConfigError) -> RunDirRefused:
    from ..cli import flatten, verbose

    if verbose():
        import traceback

        traceback.print_exception(exc)
    return RunDirRefused(f"error: {flatten(exc)}")


class RunDirGuard(Callback):
    """Claims the run dir, or the sweep dir, after composition and before Hydra writes anything."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir = Path(str(OmegaConf.select(config, "hydra.run.dir"))).expanduser().absolute()
        try:
            lock = rank_lock_name(launched_rank())
            if held_by_someone(run_dir / lock):  # a live run's folder: refused before Hydra rewrites its .hydra/
                raise busy(run_dir, name=lock)
            claim(run_dir, "hydra.run.dir", hydra_made=False)
        except ConfigError as exc:
            raise refused(exc) from None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(str(OmegaConf.select(config, "hydra.sweep.dir"))).expanduser().absolute()
        try:
            check_launcher(config)  # a launcher that cannot start here: refused before anything is written
            check(sweep, "hydra.sweep.dir", SWEEP_MARKER, hydra_made=False)
            check_job_dirs(sweep)
            claim(sweep, "hydra.sweep.dir", SWEEP_MARKER, hydra_made=False)
        except ConfigError as exc:
            raise refused(exc) from None
