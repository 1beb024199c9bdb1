"""Experiment tracking: one Aim run per job (``tracking=aim`` / ``aim_remote``), or nothing (``off``).

Trackers are built by Hydra from ``conf/tracking/*.yaml`` (each a partial of
its class): ``build(cfg.tracking)(hparams=..., context=..., resume_hash=...)``.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from omegaconf import MISSING

from ..schema import ALL, schema
from .context import JobContext, job_context


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # surrogates: undecodable bytes from the command line
        return False
    return True


@schema("tracking")
class TrackingConfig:
    """A tracker factory: ``build(cfg.tracking)(hparams=..., context=..., resume_hash=...)``."""

    _target_: str = MISSING
    _partial_: bool = True  # the job adds hparams, context and resume_hash
    experiment: str | None = None  # default: named after the sweep (or the single run)
    UNPINNED: ClassVar[tuple] = ALL
    # a name Aim stores as UTF-8 text (bytes a terminal could not decode left a half-made run behind)
    CHECKS: ClassVar[tuple] = (
        (
            "experiment",
            lambda v: v is None or (str(v).isprintable() and bool(str(v).strip()) and _utf8(str(v))),
            "null or printable text (UTF-8, no control characters)",
        ),
    )
    NULLABLE: ClassVar[tuple] = ("experiment",)


class Tracker(Protocol):
    hash: str | None

    def track(
        self, values: dict[str, float], *, step: int, epoch: int | None = None, context: dict | None = None
    ) -> None: ...  # context: extra Aim context ({"rank": r})

    def finish(self, status: str) -> None: ...  # run["status"] = "completed" | "stopped"

    def fail(self, reason: str) -> None: ...  # run["status"] = "failed", run["error"] = reason, tag "failed"

    def begin_close(self) -> None: ...  # optional: start flushing while the job tears down; close() then waits

    def close(self, within: float | None = None) -> None: ...  # within: a bound (a stopping run's budget), if taken


class NullTracker:
    """``tracking=off``: takes whatever a tracker is built with, records nothing."""

    hash = None

    def __init__(self, **_) -> None:
        pass

    def track(self, values, *, step, epoch=None, context=None) -> None:
        pass

    def finish(self, status: str) -> None:
        pass

    def fail(self, reason: str) -> None:
        pass

    def begin_close(self) -> None:
        pass

    def close(self) -> None:
        pass


__all__ = ["JobContext", "NullTracker", "Tracker", "TrackingConfig", "job_context"]
