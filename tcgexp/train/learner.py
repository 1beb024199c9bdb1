"""What learns, built for a run: the model, its optimizer owning the schedule, progress and lane memory; fresh,
restored from ``resume=`` (exact continuation), or started from another run's weights (``init_from``)."""

from __future__ import annotations

import mlx.core as mx
from mlx.utils import tree_flatten
from omegaconf import DictConfig

from ..config import build
from ..learn.model import RecurrentPolicy
from ..learn.state import LaneMemory, TrainState
from ..lifecycle.init_from import Parent
from ..lifecycle.resume import Saved
from .parts import DataParts, Learner, RunContext


def make_learner(cfg: DictConfig, data: DataParts, ctx: RunContext) -> Learner:
    """Model, optimizer (with its schedule), progress and lane memory: fresh, or restored from ``cfg.resume``."""
    # every rank draws the same initial weights (checked after); seeded here, right before the draw, as
    # measuring a model for the memory estimate (preflight) builds one too
    mx.random.seed(int(cfg.seed))
    model: RecurrentPolicy = build(cfg.model)(**data.dims)
    memory = LaneMemory(len(data.index.lanes), model.hidden)  # as wide as the model says its memory is
    saved = None
    if cfg.resume:
        saved = Saved.read(
            cfg.resume,
            manifests=data.manifests,
            planner=data.planner,
            cfg=cfg,
            world=ctx.world,
            planned_microbatches=data.planned_microbatches,
            planned_steps=data.planned_steps,
            console=ctx.console,
        )
        remaining = saved.remaining_steps(data.planned_steps)
        schedule = build(cfg.scheduler)(run_steps=remaining, start=saved.progress.opt_steps)
        saved.restore_schedule(schedule, remaining)
    else:
        schedule = build(cfg.scheduler)(run_steps=sum(data.planned_steps))
    optimizer = build(cfg.optimizer)(schedule)
    optimizer.init(model.trainable_parameters())
    mx.eval(model.parameters(), optimizer.state)
    if saved is None:
        return Learner(model, optimizer, schedule, TrainState(), memory, lineage=start_from(cfg, model, optimizer, ctx))
    aim_hash = saved.restore(model, optimizer, memory, blas=ctx.blas, console=ctx.console)
    before = kernel_segments(saved.state)
    lineage = saved.state.get("lineage") if isinstance(saved.state.get("lineage"), list) else []
    return Learner(model, optimizer, schedule, saved.progress, memory, aim_hash, saved.path, before, lineage)


def start_from(cfg: DictConfig, model, optimizer, ctx: RunContext) -> list[dict]:
    """``init_from``'s weights (and moments, with init_optimizer) into a fresh run's model: its lineage."""
    if not cfg.init_from:
        return []
    parent = Parent.read(cfg.init_from)
    parent.restore(model, optimizer, carry_optimizer=bool(cfg.init_optimizer))
    lineage = parent.lineage
    was = lineage[-1]
    if ctx.world.lead:
        ctx.console.print(
            f"[train] starting from {was['checkpoint']} (epoch {was['epochs_done']}, trained on "
            f"{len(was['dates'])} day(s); {len(lineage)} generation(s) back to scratch): its weights"
            + (", its optimizer's moments" if cfg.init_optimizer else "")
            + ", a new schedule",
            markup=False,
            soft_wrap=True,
        )
    return lineage


def kernel_segments(state: dict) -> list[dict]:
    """The step path of each segment a checkpoint's run took (``kernels_segments``; a checkpoint written before
    they were recorded: its one ``kernels`` from the start)."""
    recorded = state.get("kernels_segments")
    if isinstance(recorded, list) and all(isinstance(s, dict) and isinstance(s.get("kernels"), str) for s in recorded):
        return [{"kernels": s["kernels"], "from_step": int(s.get("from_step") or 0)} for s in recorded]
    return [{"kernels": state["kernels"], "from_step": 0}] if isinstance(state.get("kernels"), str) else []


def checkpoint_estimate(learner: Learner) -> int:
    """One checkpoint's size before the first is written: the weights and the optimizer's state as they are, and
    256 KiB for the lanes in flight and state.json (the size written replaces it after the first save)."""
    arrays = [v for _, v in tree_flatten(learner.model.parameters())] + [
        v for _, v in tree_flatten(learner.optimizer.state) if isinstance(v, mx.array)
    ]
    return sum(int(v.nbytes) for v in arrays) + 2**18
