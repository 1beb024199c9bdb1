"""Experiment tracking: one Aim run per job (``tracking=aim`` / ``aim_remote``), or nothing (``off``)."""
from __future__ import annotations

from typing import Optional, Protocol

from omegaconf import DictConfig

from .context import JobContext, job_context


class Tracker(Protocol):
    hash: Optional[str]

    def track(self, values: dict[str, float], *, step: int, epoch: Optional[int] = None) -> None: ...

    def finish(self, status: str) -> None: ...  # run["status"] = "completed" | "stopped"

    def fail(self, reason: str) -> None: ...  # run["status"] = "failed", run["error"] = reason, tag "failed"

    def close(self) -> None: ...


class NullTracker:
    hash = None

    def track(self, values, *, step, epoch=None) -> None:
        pass

    def finish(self, status: str) -> None:
        pass

    def fail(self, reason: str) -> None:
        pass

    def close(self) -> None:
        pass


def make_tracker(cfg: DictConfig, *, context: JobContext, resume_hash: Optional[str] = None) -> Tracker:
    backend = str(cfg.tracking.backend)
    if backend == "off":
        return NullTracker()
    from .aim_run import AimTracker, experiment_name, run_attributes  # Aim loads only when tracking is on

    if backend == "aim_remote":
        from .remote import RemoteAimTracker

        return RemoteAimTracker(str(cfg.tracking.uri), {
            "experiment": experiment_name(cfg, context), "resume_hash": resume_hash,
            "attrs": run_attributes(cfg, context)})
    return AimTracker(cfg, context=context, resume_hash=resume_hash)


__all__ = ["Tracker", "NullTracker", "make_tracker", "JobContext", "job_context"]
