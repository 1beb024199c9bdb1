"""Building a run's parts from the composed config: the data side and the learner (fresh or resumed)."""
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
from .loop import LaneMemory, Progress
from .model import RecurrentPolicy
from .provenance import check_resumable
from .schedule import Schedule, make_schedule, resume_schedule


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
    manifests = [corpus.manifests[d] for d in corpus.dates]
    index = LaneIndex(corpus.files, manifests)
    tb = cfg.tbptt
    planner = Planner(index, chunk=tb.chunk if tb.enabled else 1, batch_size=tb.batch_size, seed=int(cfg.seed),
                      enabled=tb.enabled, order=tb.lane_order)
    lengths = [planner.microbatches_per_epoch(e) for e in range(int(cfg.trainer.epochs))]
    steps = [-(-n // int(tb.accum_steps)) for n in lengths]
    return DataParts(corpus, manifests, index, planner, lengths, steps)


@dataclass
class Learner:
    model: RecurrentPolicy
    optimizer: optim.Optimizer
    schedule: Schedule
    progress: Progress
    memory: LaneMemory
    aim_hash: Optional[str] = None
    resumed_from: Optional[Path] = None


def _schedule(cfg: DictConfig, run_steps: int) -> Schedule:
    s = cfg.scheduler
    return make_schedule(s.name, base_lr=float(cfg.optimizer.lr), warmup_steps=int(s.warmup_steps),
                         total_steps=int(s.total_steps), min_lr_ratio=float(s.min_lr_ratio), run_steps=run_steps)


def make_learner(cfg: DictConfig, data: DataParts, *, blas: str, console: Console) -> Learner:
    """Model, optimizer, schedule, progress and lane memory: fresh, or restored from ``cfg.resume``."""
    model = RecurrentPolicy(sim.FEATURE_DIM, sim.ACTION_DIM, hidden=int(cfg.model.hidden),
                            memory=bool(cfg.model.memory))
    optimizer = optim.AdamW(learning_rate=float(cfg.optimizer.lr), weight_decay=float(cfg.optimizer.weight_decay))
    optimizer.init(model.trainable_parameters())
    mx.eval(model.parameters(), optimizer.state)
    memory = LaneMemory(len(data.index.lanes), int(cfg.model.hidden))
    if not cfg.resume:
        return Learner(model, optimizer, _schedule(cfg, sum(data.planned_steps)), Progress(), memory)
    path = ckpt.find(str(cfg.resume))
    saved, lanes = ckpt.load(path, model=model, optimizer=optimizer)
    check_resumable(saved, cfg, data.manifests, path)
    if saved.get("blas") != blas:  # numerically fine, but no longer bit-identical to an uninterrupted run
        console.print(f"[train] warning: the checkpoint was trained with {saved.get('blas')}, this run uses "
                      f"{blas}; the continuation will not be bit-identical")
    progress = Progress.from_state(saved["progress"])
    memory.h[:] = lanes["train"]
    epochs = int(cfg.trainer.epochs)
    remaining = sum(data.planned_steps[progress.epoch:]) - progress.epoch_opt_steps if progress.epoch < epochs else 0
    schedule = (_schedule(cfg, remaining) if cfg.scheduler.reset
                else resume_schedule(saved["schedule"], remaining_steps=remaining))
    return Learner(model, optimizer, schedule, progress, memory, saved.get("aim_hash"), path)
