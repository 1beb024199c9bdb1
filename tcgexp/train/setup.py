"""Building a run's parts from the composed config, by ``instantiate`` alone: data side and learner.

Every part is a config group with a ``_target_``; the parts that need what only
the run knows (the lane index, the feature sizes, the horizon, the schedule)
are partials, completed here. Fresh or resumed: a resume restores the
learner's state from the checkpoint and keeps its schedule unless
``scheduler.reset=true``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import mlx.core as mx
import mlx.optimizers as optim
from omegaconf import DictConfig
from rich.console import Console

from .. import sim
from ..config import build
from ..data import Corpus
from ..plan import LaneIndex, Planner
from ..progress import stage_progress
from . import checkpoint as ckpt
from .model import RecurrentPolicy
from .preflight import check_val_rows
from .provenance import check_progress, check_resumable
from .schedule import Schedule, resume_schedule
from .state import LaneMemory, TrainState


@dataclass
class DataParts:
    corpus: Corpus
    manifests: list[dict]
    index: LaneIndex
    planner: Planner
    planned_microbatches: list[int]  # per epoch, from the packing (exactly len(epoch_plan(e)))
    planned_steps: list[int]


def prepare_data(cfg: DictConfig) -> DataParts:
    """Build or validate the days, index the lanes, and count every epoch's steps (the horizon; no plans built)."""
    corpus: Corpus = build(cfg.dataset)
    progress, update = stage_progress()
    with progress:
        corpus.build(progress=update, build_missing=not corpus.selected)  # a selection only uses built days
    index = LaneIndex.of(corpus)
    planner: Planner = build(cfg.tbptt)(index)
    check_val_rows(cfg, planner.validation_plan().rows)  # an empty split fails here, not after an epoch
    epochs = range(int(cfg.trainer.epochs))
    lengths = [planner.microbatches_per_epoch(e) for e in epochs]
    steps = [planner.steps_per_epoch(e) for e in epochs]
    return DataParts(corpus, [corpus.manifests[d] for d in corpus.dates], index, planner, lengths, steps)


@dataclass
class Learner:
    model: RecurrentPolicy
    optimizer: optim.Optimizer  # owns the schedule (learning_rate = optimizer.lr x schedule(step))
    schedule: Schedule
    progress: TrainState
    memory: LaneMemory
    aim_hash: Optional[str] = None
    resumed_from: Optional[Path] = None


def make_learner(cfg: DictConfig, data: DataParts, *, blas: str, console: Console) -> Learner:
    """Model, optimizer (with its schedule), progress and lane memory: fresh, or restored from ``cfg.resume``."""
    model: RecurrentPolicy = build(cfg.model)(feature_dim=sim.FEATURE_DIM, action_dim=sim.ACTION_DIM)
    memory = LaneMemory(len(data.index.lanes), model.hidden)
    if not cfg.resume:
        schedule = build(cfg.scheduler)(run_steps=sum(data.planned_steps))
        optimizer = _optimizer(cfg, model, schedule)
        return Learner(model, optimizer, schedule, TrainState(), memory)
    path = ckpt.find(str(cfg.resume))
    saved_state = ckpt.read_state(path)  # every file verified against checksums.json
    if not (path / ckpt.CHECKSUMS).exists():
        console.print(f"[train] warning: {path} predates checkpoint checksums ({ckpt.CHECKSUMS}); its files "
                      "cannot be verified, only parsed and checked against the plan")
    check_resumable(saved_state, cfg, data.manifests, path)
    epochs = int(cfg.trainer.epochs)
    check_progress(saved_state, planned_microbatches=data.planned_microbatches, planned_steps=data.planned_steps,
                   accum_steps=int(cfg.tbptt.accum_steps), epochs=epochs, path=path)
    try:
        progress = TrainState.from_state(saved_state["progress"])
    except TypeError as exc:  # keys this code does not know
        raise ckpt.CheckpointError(f"{path / 'state.json'}: progress is unreadable ({exc})") from exc
    remaining = sum(data.planned_steps[progress.epoch:]) - progress.epoch_opt_steps if progress.epoch < epochs else 0
    if cfg.scheduler.reset:  # a new schedule over what this run has left, from the optimizer's current step
        schedule = build(cfg.scheduler)(run_steps=remaining, start=progress.opt_steps)
    else:
        try:
            schedule = resume_schedule(saved_state["schedule"], step=progress.opt_steps, remaining_steps=remaining)
        except (KeyError, TypeError, ValueError, ImportError) as exc:  # ScheduleError (horizon) passes through
            if type(exc).__module__.startswith("tcgexp."):
                raise
            raise ckpt.CheckpointError(f"{path / 'state.json'}: schedule is unreadable ({type(exc).__name__}: "
                                       f"{exc}); resume from another checkpoint") from exc
    optimizer = _optimizer(cfg, model, schedule)
    saved, lanes = ckpt.load(path, model=model, optimizer=optimizer, lanes_shape=memory.h.shape)
    if saved.get("blas") != blas:  # numerically fine, but no longer bit-identical to an uninterrupted run
        console.print(f"[train] warning: the checkpoint was trained with {saved.get('blas')}, this run uses "
                      f"{blas}; the continuation will not be bit-identical")
    memory.h[:] = lanes["train"]
    return Learner(model, optimizer, schedule, progress, memory, saved.get("aim_hash"), path)


def _optimizer(cfg: DictConfig, model: RecurrentPolicy, schedule: Schedule) -> optim.Optimizer:
    optimizer: optim.Optimizer = build(cfg.optimizer)(schedule)
    optimizer.init(model.trainable_parameters())
    mx.eval(model.parameters(), optimizer.state)
    return optimizer
