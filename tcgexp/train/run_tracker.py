"""A run's tracked run: opened for rank 0 (a resume continues the checkpoint's), marked failed on any exception,
closed within what a stopping signal leaves of its budget."""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator

from omegaconf import DictConfig, OmegaConf

from ..config import build
from ..lifecycle.signals import STOP_GRACE_S, StopSignals
from ..track import NullTracker, job_context
from .parts import RunContext


def open_tracker(cfg: DictConfig, ctx: RunContext, resume_hash: str | None, lineage: list[dict] = ()):
    """One tracked run per training run: rank 0's (a resume continues the checkpoint's); its params hold the
    run's config and, for a run started from another's weights, its lineage (``init_from``)."""
    if not ctx.world.lead:
        return NullTracker()
    hparams = {**OmegaConf.to_container(cfg, resolve=True), "world_size": ctx.world.size}
    if lineage:
        hparams["lineage"] = list(lineage)
    return build(cfg.tracking)(hparams=hparams, context=job_context(ctx.run_dir), resume_hash=resume_hash)


@contextlib.contextmanager
def tracked(tracker) -> Iterator:
    """The tracker for the run's duration: marked failed (with the reason) on any exception; then its closing
    begins (``close``, which waits for it, comes after the run's own teardown)."""
    try:
        yield tracker
    except BaseException as exc:
        tracker.fail(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        raise
    finally:
        getattr(tracker, "begin_close", tracker.close)()  # (a tracker of a plug-in's may only have close)


def close_tracker(tracker, signals: StopSignals | None) -> None:
    """Wait for the tracked run to close; after a stopping signal within what is left of its budget
    (``STOP_GRACE_S`` and a margin from the signal, at least a second; a second), if the tracker takes a bound."""
    at = signals.requested_at if signals is not None else None
    if at is not None and "within" in inspect.signature(tracker.close).parameters:
        left = 0.0 if signals.forced else STOP_GRACE_S + 2.0 - (time.monotonic() - at)
        tracker.close(within=max(1.0, left))
    else:
        tracker.close()
