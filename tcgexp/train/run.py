"""``train(cfg)``: the plain function behind ``python -m tcgexp.train``; tests call it directly.

``run`` reads as lightning-hydra-template's ``train``: build the data side,
build the learner, build the trainer (``instantiate`` of its group, with its
checkpointer and tracker), fit, return the metrics. ``train`` around it
checks the config and the surroundings first and owns the run folder and
the stopping signals. ``Config`` is the schema the composed config starts from.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

from omegaconf import MISSING, DictConfig
from rich.console import Console

from ..cache.registry import reclaim
from ..cache.rowgroup import CacheConfig
from ..cli import say_now
from ..config import build, validate
from ..data.corpus import DatasetConfig
from ..ownership import SPILL_MARKER
from ..plan.loader import LoaderConfig
from ..plan.planner import TbpttConfig
from ..progress import report_console
from ..rundir import claim, discarded_if_refused
from ..schema import schema, within
from ..track import TrackingConfig, job_context
from ..track.summary import write_summary
from .blas import load_fast_blas
from .distributed import DistributedError, World, rank_lock_name
from .errors import USER_ERRORS
from .model import ModelConfig
from .optim import OptimizerConfig
from .outputs import CheckpointConfig
from .preflight import check_stop_at, preflight
from .rank_status import note_rank
from .result_file import leave_failed
from .runlock import hold_run_dir
from .schedule import SchedulerConfig
from .setup import make_learner, prepare_data
from .signals import ForcedStop, RunInterrupted, StopSignals, exit_code
from .trainer import RunContext, Trainer, TrainerConfig


@schema(name="base_config")
class Config:
    """The training run (``conf/config.yaml``): one option of every group, and the run's own keys."""

    dataset: DatasetConfig = MISSING
    cache: CacheConfig = MISSING
    loader: LoaderConfig = MISSING
    tbptt: TbpttConfig = MISSING
    scheduler: SchedulerConfig = MISSING
    model: ModelConfig = MISSING
    optimizer: OptimizerConfig = MISSING
    trainer: TrainerConfig = MISSING
    checkpoint: CheckpointConfig = MISSING
    tracking: TrackingConfig = MISSING
    seed: int = 0  # initial weights and lane shuffles
    resume: Optional[str] = None  # a run dir or checkpoint dir to continue exactly
    # what the task returns to a sweeper: val/<metric> (val/loss, val/policy, val/accuracy, ...) | best/val_loss
    optimized_metric: Optional[str] = "val/loss"
    UNPINNED: ClassVar[tuple] = ("resume", "optimized_metric")
    # MLX and numpy seed generators take an unsigned 32-bit seed: anything else is a raw TypeError deep inside
    CHECKS: ClassVar[tuple] = (("seed", within(0, 2**32, open_hi=True), "in [0, 2**32)"),)


def run_dir_from_hydra() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def train(cfg: DictConfig, run_dir: Optional[Path] = None, console: Console | None = None,
          memory_probe: Optional[Callable[[], float]] = None, overrides: Optional[list[str]] = None) -> dict[str, Any]:
    """Train as `cfg` says; returns the result dict (also written to <run dir>/result.json) and the model.

    `memory_probe` replaces the caches' psutil probe (a percent): how tests drive memory
    pressure without exhausting the machine. `overrides` (the command line's) go into every
    checkpoint, so ``resume=<run dir>`` alone can compose the run again.

    A stopping signal (SIGTERM, Ctrl-C, ...: ``signals.py``) ends the run resumably: latest/ and
    result.json (status "interrupted") written, then ``RunInterrupted``, a SystemExit with code
    128 + signum, after one line on stderr.
    """
    run_dir = Path(run_dir) if run_dir is not None else run_dir_from_hydra()
    world = World.init()  # rank and size from mlx.launch; size 1 for a plain run
    world.run_dir = run_dir
    note_rank(size=world.size, run_dir=str(run_dir))  # for tcgexp-launch's report (nothing without it)
    world.check_same_config(cfg, run_dir)  # ranks that composed different runs all refuse, naming the keys
    validate(cfg)  # impossible values are refused before anything is built or written
    console = console or (report_console() if world.lead else Console(quiet=True))  # rank 0 reports
    preflight(cfg, run_dir)  # the run dir, validation, memory: refused before anything is written
    claim(run_dir)  # created and marked ours (or a folder of ours again); removed if refused before any output
    # one run per folder (each rank holds its own lock in it); signals stop the run cleanly. Every
    # line that says how the run ended is printed inside this block, while our handler holds SIGTERM:
    # when one rank of an mlx.launch run exits non-zero the launcher SIGTERMs the others at once, and
    # after the block Python's default would end them before their line.
    with discarded_if_refused(run_dir), hold_run_dir(run_dir, rank_lock_name(world.rank)), \
            StopSignals() as signals:
        try:
            context = RunContext(cfg, run_dir, world, console, blas=load_fast_blas(), signals=signals,
                                 memory_probe=memory_probe, overrides=overrides)
            result = run(cfg, context)
            if result["status"] == "interrupted":
                p = result["processed"]
                line = (f"[train] interrupted by {result['signal']} after optimizer step {p['optimizer_steps']}: "
                        f"latest/ written, spill removed; continue with resume={run_dir}")
                print(line, file=sys.stderr, flush=True)
                raise RunInterrupted(exit_code(result["signal"]), line, result)
        except ForcedStop as stop:
            line = (f"[train] stopped at once by a second {stop.signame}; spill removed; resume={run_dir} "
                    f"continues from its last latest/ (every checkpoint.latest_every_steps)")
            print(line, file=sys.stderr, flush=True)
            raise RunInterrupted(exit_code(stop.signame), line) from None
        except USER_ERRORS as exc:
            if world.size > 1:  # a rank died, diverged, ...: the launcher is about to SIGTERM the others
                if isinstance(exc, DistributedError):  # (rank 0 may be the one gone: a survivor says so on disk)
                    leave_failed(run_dir, str(exc), rank=world.rank, world_size=world.size)
                say_now(exc)
            raise
    return result


def run(cfg: DictConfig, ctx: RunContext) -> dict:
    """Build the data side, build the learner, build the trainer, fit: the run's result and its model."""
    reclaimed = reclaim(SPILL_MARKER).line()  # spill of runs that died (SIGKILL) anywhere, before adding ours
    if reclaimed:
        ctx.console.print(reclaimed, markup=False, soft_wrap=True)
    data = prepare_data(cfg, ctx.world)  # corpus, lane index, planner (this rank's shard), cache and loader, counts
    learner = make_learner(cfg, data, ctx)  # model, optimizer owning its schedule, progress: fresh or resumed
    check_stop_at(cfg, learner.progress.epoch, learner.progress.opt_steps)  # stops lie ahead of a resumed checkpoint
    ctx.world.check_same_weights(learner.model, "start-up")
    trainer: Trainer = build(cfg.trainer)(checkpoint=build(cfg.checkpoint), tracking=build(cfg.tracking), run=ctx)
    result = trainer.fit(data, learner)
    if result["status"] == "interrupted" and ctx.world.lead:  # in a sweep Hydra's job-end callback will not run
        write_sweep_summary(ctx.run_dir)
    return {**result, "model": learner.model}


def write_sweep_summary(run_dir: Path) -> None:
    """An interrupted job of a sweep brings the sweep's summary up to date itself."""
    context = job_context(run_dir)
    if context.in_sweep:
        write_summary(Path(context.sweep_dir))
