"""What a trial's job left in its run dir: done at its rung (with the objective), failed, or to continue.

Read from disk, not from the launcher's return: every launcher (in-process, joblib, SLURM, Ray) leaves
the same run dir, a job the launcher lost (a killed sweep, a SLURM node gone) left it too, and a sweep
continued after a SIGKILL finds there what the dead one never recorded. ``latest/`` is the truth: it
is written atomically after an epoch's validation, and its history holds every validation so far.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..lifecycle.ckpt_files import find
from ..report.jobs import JOB_STATUS
from ..track.aim_run import recorded_run

DONE, FAILED, CONTINUE = "done", "failed", "continue"
HELD = "held"  # stopped by the machine, not by its configuration (a full disk): continued once that is fixed
# what a job's error says when its disk was full (OSError's strerror, CheckpointWriteError's fix, SQLite's word)
DISK_FULL = ("No space left on device", "Disk quota exceeded", "database or disk is full", "free disk space")


@dataclass
class Outcome:
    kind: str  # DONE: trained to the rung's budget | FAILED: error says why | CONTINUE: stopped early | HELD
    value: float | None = None  # the objective at the rung's budget (DONE)
    error: str | None = None
    signal: str | None = None  # CONTINUE after a stopping signal (SIGTERM, SIGINT): its name


def objective(history: list[dict], epochs: int, metric: str) -> float:
    """`metric` after `epochs` epochs: val/<key> from that epoch's validation, best/val_loss the best so far."""
    prefix, _, key = metric.partition("/")
    if prefix == "best":
        return min(float(h["val"]["loss"]) for h in history[:epochs])
    return float(history[epochs - 1]["val"][key])


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def latest_state(run_dir: Path) -> dict | None:
    """The run dir's latest/ state.json (verified), or None when there is no usable checkpoint."""
    from ..lifecycle import checkpoint as ckpt  # MLX loads after the entry point's setup() (it binds its BLAS)

    try:
        return ckpt.read_state(find(str(run_dir)))
    except ckpt.CheckpointError:
        return None


def read(run_dir: Path, budget: int, metric: str, job_error: str | None = None) -> Outcome:
    """The outcome of training `run_dir` to `budget` epochs; `job_error`: the launcher's, if it said one."""
    run_dir = Path(run_dir)
    state = latest_state(run_dir)
    progress = (state or {}).get("progress", {})
    if state is not None and int(progress.get("epoch", 0)) >= budget:  # epochs completed, validated
        value = objective(progress["history"], budget, metric)
        if math.isfinite(value):
            return Outcome(DONE, value)
        return Outcome(FAILED, error=f"{metric} is {value} after {budget} epochs")
    result = _json(run_dir / "result.json")
    status = _json(run_dir / JOB_STATUS)
    if result.get("status") == "diverged":
        return Outcome(FAILED, error=result.get("error") or "diverged")
    error = job_error or (status.get("error") or "failed" if status.get("status") == "FAILED" else None)
    if error is not None:  # a full disk fails any configuration alike: the trial waits for space, not FAIL
        return Outcome(HELD if any(s in error for s in DISK_FULL) else FAILED, error=error)
    if result.get("status") == "interrupted":
        return Outcome(CONTINUE, signal=result.get("signal"))
    return Outcome(CONTINUE)  # killed, lost, or never started: continue from latest/ if there is one


def aim_hash(run_dir: Path) -> str | None:
    """The run's Aim run (its checkpoint carries it across rungs), or None (untracked)."""

    state = latest_state(Path(run_dir)) or {}
    return state.get("aim_hash") or recorded_run(run_dir) or _json(Path(run_dir) / "result.json").get("aim_hash")
