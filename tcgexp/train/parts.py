"""What a run is made of, as ``run.py`` hands it to the trainer: the data side, the learner, the run's context.

Plain records, built in one place (``run.py``, the composition root) and read by the trainer
(``trainer.py``) and what it leaves behind (``outputs.py``); nothing here builds anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import mlx.optimizers as optim
from omegaconf import DictConfig
from rich.console import Console

from ..data import Corpus
from ..learn.model import RecurrentPolicy
from ..learn.schedule import Schedule
from ..learn.state import LaneMemory, TrainState
from ..lifecycle.distributed import World
from ..lifecycle.signals import StopSignals
from ..plan import LaneIndex, Planner
from ..plan.loader import train_columns


@dataclass
class DataParts:
    """The data side: the days, their lanes and plans, and every epoch's counts (the horizon)."""

    corpus: Corpus
    manifests: list[dict]
    index: LaneIndex
    planner: Planner
    planned_microbatches: list[int]  # per epoch, from the packing (exactly len(epoch_plan(e)): positions)
    planned_steps: list[int]
    planned_real: list[int]  # per epoch, microbatches with rows over all ranks (= positions without shards)
    width: int  # the decision width its plans were made with (``Plan.width``): what ``prepare`` pads decisions to
    # what the model is sized by (data.games.model_dims: the game's feature and action widths, its option_dim)
    dims: dict = field(default_factory=dict)

    @property
    def columns(self) -> list[str]:
        """What the loaders read per row: the common training columns and, for the option head, its own."""
        return train_columns(self.dims.get("option_dim", 0))


@dataclass
class Learner:
    """What learns and what it carries: the model, its optimizer and schedule, progress and lane memory."""

    model: RecurrentPolicy
    optimizer: optim.Optimizer  # owns the schedule (learning_rate = optimizer.lr x schedule(step))
    schedule: Schedule
    progress: TrainState
    memory: LaneMemory
    aim_hash: str | None = None
    resumed_from: Path | None = None
    # the step path of each segment before this one (its checkpoint's record: [{"kernels", "from_step"}, ...])
    kernels_before: list[dict] = field(default_factory=list)
    # the checkpoints this model descends from (init_from), the run that started from scratch first
    lineage: list[dict] = field(default_factory=list)
    # where this process started (a resumed run: the checkpoint's counts), so its throughput is its own
    start_rows: int = field(init=False, default=0)
    start_opt_steps: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.start_rows, self.start_opt_steps = self.progress.rows, self.progress.opt_steps


@dataclass
class RunContext:
    """What only the run knows, beside its parts: its config, folder, ranks, console and signals."""

    cfg: DictConfig
    run_dir: Path
    world: World
    console: Console
    blas: str
    signals: StopSignals | None = None
    memory_probe: Callable[[], float] | None = None  # replaces the caches' psutil probe (tests)
    overrides: list[str] | None = None  # the command line's: every checkpoint records them
    started: float = field(default_factory=time.perf_counter)
    # says what the run is doing now in its folder's lock file (``Claim.note``): the next run there names the phase
    # of a run that died without a record (a crash while a library loads)
    note: Callable[[str], None] = lambda phase: None
