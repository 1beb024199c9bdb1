"""Aim tracking for one job: hparams = the resolved config; metrics by name prefix.

``train/*`` and ``lr`` each optimizer step, ``cache_train/*`` with them,
``val/*`` and ``cache_val/*`` each validation. A resumed job continues the
same Aim run (its hash travels in the checkpoint's state.json).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf


class AimTracker:
    def __init__(self, cfg: DictConfig, *, experiment: str, resume_hash: Optional[str] = None) -> None:
        import logging

        import aim

        logging.getLogger("aim").setLevel(logging.WARNING)  # its INFO chatter would drown the run's report
        repo = Path(str(cfg.tracking.repo or ".")).expanduser().absolute()
        repo.mkdir(parents=True, exist_ok=True)
        self.run = aim.Run(run_hash=resume_hash, repo=str(repo), experiment=experiment)
        self.run["hparams"] = OmegaConf.to_container(cfg, resolve=True)
        self.hash = self.run.hash

    def track(self, values: dict[str, float], *, step: int, epoch: Optional[int] = None) -> None:
        for name, value in values.items():
            self.run.track(float(value), name=name, step=step, epoch=epoch)

    def close(self) -> None:
        if self.run is not None:
            self.run.close()
            self.run = None


def open_repo(path: str | Path):
    """The Aim repo at `path` with every run indexed, so ``iter_runs()`` sees runs just written.

    Aim indexes runs in the background of ``aim up``/``aim server``; a script reading a
    repo right after a sweep has to index them itself.
    """
    import aim
    from aim.sdk.index_manager import RepoIndexManager

    repo = aim.Repo(str(Path(path).expanduser().absolute()))
    manager = RepoIndexManager.get_index_manager(repo)
    for run_hash in repo.list_all_runs():
        manager.index(run_hash)
    return repo
