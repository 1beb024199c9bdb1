"""Building a run's parts from the composed config, by ``instantiate`` alone: data side and learner.

Every part is a config group with a ``_target_``; the parts that need what only
the run knows (the lane index, the feature sizes, the horizon, the schedule,
the cache's files and spill dir) are partials, completed here or by the
trainer. Fresh or resumed: a resume restores the learner's state from the
checkpoint and keeps its schedule unless ``scheduler.reset=true``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import mlx.core as mx
import mlx.optimizers as optim
from omegaconf import DictConfig

from .. import sim
from ..cache import RowGroupCache
from ..config import ConfigError, build
from ..data import Corpus
from ..plan import LaneIndex, Planner
from ..progress import stage_progress
from . import checkpoint as ckpt
from .model import RecurrentPolicy
from .preflight import check_memory, check_val_rows, planned_slots
from .provenance import check_progress, check_resumable
from .distributed import World
from .schedule import Schedule
from .state import LaneMemory, TrainState

if TYPE_CHECKING:
    from .trainer import RunContext


@dataclass
class DataParts:
    """The data side: the days, their lanes and plans, and the cache and loader the trainer opens over them."""

    corpus: Corpus
    manifests: list[dict]
    index: LaneIndex
    planner: Planner
    planned_microbatches: list[int]  # per epoch, from the packing (exactly len(epoch_plan(e)): positions)
    planned_steps: list[int]
    planned_real: list[int]  # per epoch, microbatches with rows over all ranks (= positions without shards)
    cache: Callable[..., RowGroupCache]  # (files, columns, spill_dir=, name=, memory_probe=): one per split
    loader: Callable  # (cache, columns, transform=)


def shards_of(cfg: DictConfig, world: World) -> tuple[int, int | None]:
    """(shards, this process's shard): one per rank under a launcher; ``tbptt.shards=N`` on one process
    runs the N shards interleaved (shard None), which needs whole positions per optimizer window."""
    want = cfg.tbptt.get("shards")
    if world.size > 1:
        if want not in (None, world.size):
            raise ConfigError(f"tbptt.shards={want} but {world.size} ranks were launched: leave tbptt.shards "
                              f"unset (one shard per rank) or set it to {world.size}")
        return world.size, world.rank
    shards = int(want or 1)
    accum = int(cfg.tbptt.accum_steps)
    if shards > 1 and accum % shards:
        raise ConfigError(f"tbptt.shards={shards} with tbptt.accum_steps={accum}: one process runs {shards} ranks' "
                          f"microbatches in turn, so an optimizer window must hold whole turns; set "
                          f"tbptt.accum_steps to a multiple of {shards} ({shards} x the ranks' accum_steps)")
    return shards, None


def prepare_data(cfg: DictConfig, world: World | None = None) -> DataParts:
    """Build or validate the days, index the lanes, check that the plan's largest microbatch fits in memory, and
    count every epoch's steps (the horizon; from the packing alone)."""
    world = world or World()
    corpus: Corpus = build(cfg.dataset)
    progress, update = stage_progress()
    with progress:
        corpus.build(progress=update, build_missing=not corpus.selected)  # a selection only uses built days
    index = LaneIndex.of(corpus)
    shards, shard = shards_of(cfg, world)
    planner: Planner = build(cfg.tbptt)(index, shards=shards, shard=shard)
    check_val_rows(cfg, planner.split_rows("val"))  # an empty split fails here, not after an epoch
    check_memory(cfg, planned_slots(planner))  # the plan's own largest microbatch, before the first step
    epochs = range(int(cfg.trainer.epochs))
    # epoch by epoch (with shards each epoch's plans are made once and serve all three counts)
    counts = [(planner.microbatches_per_epoch(e), planner.steps_per_epoch(e), planner.real_microbatches(e))
              for e in epochs]
    lengths, steps, real = ([c[i] for c in counts] for i in range(3))
    return DataParts(corpus, [corpus.manifests[d] for d in corpus.dates], index, planner, lengths, steps, real,
                     cache=build(cfg.cache), loader=build(cfg.loader))


@dataclass
class Learner:
    model: RecurrentPolicy
    optimizer: optim.Optimizer  # owns the schedule (learning_rate = optimizer.lr x schedule(step))
    schedule: Schedule
    progress: TrainState
    memory: LaneMemory
    aim_hash: Optional[str] = None
    resumed_from: Optional[Path] = None
    # where this process started (a resumed run: the checkpoint's counts), so its throughput is its own
    start_rows: int = field(init=False, default=0)
    start_opt_steps: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.start_rows, self.start_opt_steps = self.progress.rows, self.progress.opt_steps


def make_learner(cfg: DictConfig, data: DataParts, run: "RunContext") -> Learner:
    """Model, optimizer (with its schedule), progress and lane memory: fresh, or restored from ``cfg.resume``."""
    # every rank draws the same initial weights (checked after); seeded here, right before the draw, as
    # measuring a model for the memory estimate (preflight) builds one too
    mx.random.seed(int(cfg.seed))
    model: RecurrentPolicy = build(cfg.model)(feature_dim=sim.FEATURE_DIM, action_dim=sim.ACTION_DIM)
    memory = LaneMemory(len(data.index.lanes), model.hidden)  # as wide as the model says its memory is
    if not cfg.resume:
        schedule = build(cfg.scheduler)(run_steps=sum(data.planned_steps))
        optimizer = _optimizer(cfg, model, schedule)
        return Learner(model, optimizer, schedule, TrainState(), memory)
    path = ckpt.find(str(cfg.resume))
    saved_state = ckpt.read_state(path)  # every file verified against checksums.json
    if not (path / ckpt.CHECKSUMS).exists():
        run.console.print(f"[train] warning: {path} predates checkpoint checksums ({ckpt.CHECKSUMS}); its files "
                          "cannot be verified, only parsed and checked against the plan")
    check_resumable(saved_state, cfg, data.manifests, path)
    check_world(saved_state, run.world, data.planner.shards, path)
    epochs = len(data.planned_steps)  # the run's epochs (trainer.epochs), counted by prepare_data
    check_progress(saved_state, planned_microbatches=data.planned_microbatches, planned_steps=data.planned_steps,
                   accum_steps=int(cfg.tbptt.accum_steps), epochs=epochs, path=path)
    try:
        progress = TrainState.from_state(saved_state["progress"])
    except TypeError as exc:  # keys this code does not know
        raise ckpt.CheckpointError(f"{path / 'state.json'}: progress is unreadable ({exc})") from exc
    remaining = sum(data.planned_steps[progress.epoch:]) - progress.epoch_opt_steps if progress.epoch < epochs else 0
    # a schedule over what this run has left, from the optimizer's current step: kept as it is with
    # scheduler.reset=true, else set back to the checkpoint's (its horizon and phase)
    schedule = build(cfg.scheduler)(run_steps=remaining, start=progress.opt_steps)
    try:
        schedule.load_state_dict(saved_state["schedule"], step=progress.opt_steps, remaining_steps=remaining)
    except (KeyError, TypeError, ValueError) as exc:  # ScheduleError (horizon, class) passes through
        if type(exc).__module__.startswith("tcgexp."):
            raise
        raise ckpt.CheckpointError(f"{path / 'state.json'}: schedule is unreadable ({type(exc).__name__}: "
                                   f"{exc}); resume from another checkpoint") from exc
    optimizer = _optimizer(cfg, model, schedule)
    saved, lanes = ckpt.load(path, model=model, optimizer=optimizer, lanes_shape=(memory.lanes, memory.hidden),
                             expect=saved_state)  # the checkpoint planned from, not one a live run wrote since
    if saved.get("blas") != run.blas:  # numerically fine, but no longer bit-identical to an uninterrupted run
        run.console.print(f"[train] warning: the checkpoint was trained with {saved.get('blas')}, this run uses "
                          f"{run.blas}; the continuation will not be bit-identical")
    memory.load(lanes["train"])
    return Learner(model, optimizer, schedule, progress, memory, saved.get("aim_hash"), path)


def check_world(saved: dict, world: World, shards: int, path: Path) -> None:
    """A checkpoint continues on the number of ranks (and shards) it was written by: the plan, the lane
    memories' owners and the reduction all follow from it."""
    was = saved.get("world") or {"size": 1, "shards": 1}  # checkpoints from before distributed training
    if (int(was.get("size", 1)), int(was.get("shards", 1))) != (world.size, shards):
        how = (f"mlx.launch -n {was.get('size')} ..." if int(was.get("size", 1)) > 1
               else ("a plain tcgexp-train" + (f" with tbptt.shards={was.get('shards')}"
                                               if int(was.get("shards", 1)) > 1 else "")))
        raise ckpt.CheckpointError(
            f"resume={path}: the checkpoint was written by {was.get('size')} rank(s) over {was.get('shards')} "
            f"shard(s), this run has {world.size} rank(s) over {shards}; resume it the same way ({how}), or "
            "start a new run from its weights")


def _optimizer(cfg: DictConfig, model: RecurrentPolicy, schedule: Schedule) -> optim.Optimizer:
    optimizer: optim.Optimizer = build(cfg.optimizer)(schedule)
    optimizer.init(model.trainable_parameters())
    mx.eval(model.parameters(), optimizer.state)
    return optimizer
