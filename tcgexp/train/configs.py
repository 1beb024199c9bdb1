"""The training app's typed schemas: the run's root (``conf/config.yaml``: one option of every group and the
run's own keys), the ``trainer`` and ``checkpoint`` groups (``eval``'s is ``tcgexp.eval.config``'s).

Like ``tcgexp.learn.configs`` they import no MLX: ``tcgexp.app`` registers them to compose a run, and composing
must not load MLX before the entry point has set up its BLAS (``tcgexp.learn.blas``).
"""

from __future__ import annotations

from typing import ClassVar

from omegaconf import MISSING

from ..cache.rowgroup import CacheConfig
from ..data.corpus import DatasetConfig
from ..eval.config import EvalConfig
from ..learn.configs import KERNELS, ModelConfig, OptimizerConfig, SchedulerConfig
from ..plan.loader import LoaderConfig
from ..plan.planner import TbpttConfig
from ..schema import ALL, FLOAT32_MAX, INT32_MAX, schema, within
from ..track import TrackingConfig


@schema("trainer")
class TrainerConfig:
    """The loop over epochs (``Trainer``); the run supplies its checkpointer, tracker and context."""

    _target_: str = MISSING
    _partial_: bool = True
    epochs: int = 3  # each epoch = one full plan over the train split; the final epoch is validated and kept
    aux_weight: float = (
        0.25  # weight of the four auxiliary losses (KO, prize delta, terminal, return) beside the policy
    )
    grad_clip: float = 1.0  # global-norm clip of every update's gradients; 0 = no clipping
    max_steps: int = 0  # >0: stop (resumably, latest/ written) after this many optimizer steps; 0 = run all epochs
    # >0: stop (resumably, validated, latest/ written) once this many epochs are done, while the schedule's
    # horizon stays `epochs`: what a successive-halving rung trains to; 0 = run all epochs
    stop_at_epoch: int = 0
    # the tracker's cadence: every n-th optimizer step's train/*, lr and cache_train/* values are tracked (and every
    # epoch's last step and validation, exactly); 1 = every step, as the reference system; each tracked step
    # costs the tracker ~40 values (Aim: ~5 ms of its own process, on the cores the step uses). 50 (Lightning's
    # log_every_n_steps): Aim added 0.36-0.42 s to a 2-epoch 5d run, 10 added 0.81-1.80 s, 1 added 5 s
    # (`python -m tcgexp.bench train --parts runs --track-every 1 10 50`, 2026-12-02; docs/benchmarks.md)
    track_every: int = 50
    # which step runs: fused = tcgexp's CPU kernels (tcgexp/kernels: built once per MLX version, faster), pure = MLX
    # operations only, auto = fused where the kernels load, else pure (one line says why). Both compute
    # bit-identical weights, so a resume may switch
    kernels: str = "auto"
    # how long a run goes, what it reports and which (bit-identical) step computes it, not what each step computes
    UNPINNED: ClassVar[tuple] = ("epochs", "max_steps", "stop_at_epoch", "track_every", "kernels")
    CHECKS: ClassVar[tuple] = (
        ("epochs", within(1, 10**6), "in [1, 1e6]"),
        ("aux_weight", within(0.0, FLOAT32_MAX), ">= 0 (0 = the policy loss alone)"),
        ("grad_clip", within(0.0, FLOAT32_MAX), ">= 0 (0 = no clipping)"),
        ("max_steps", within(0, INT32_MAX), "in [0, 2**31) (0 = no limit)"),
        ("stop_at_epoch", within(0, 10**6), "in [0, 1e6] (0 = at trainer.epochs)"),
        ("track_every", within(1, INT32_MAX), "in [1, 2**31) optimizer steps (1 = every step)"),
        ("kernels", lambda v: v in KERNELS, f"one of {', '.join(KERNELS)}"),
    )


@schema("checkpoint")
class CheckpointConfig:
    """When a run's checkpoints are written (``Checkpointer``); the trainer supplies the folder."""

    _target_: str = MISSING
    _partial_: bool = True
    every_epochs: int = 1  # epoch_NNNN/ snapshots; the final epoch is always kept
    # rolling latest/ for exact resume; smaller = less lost work after a crash, more I/O; 0 = only at epoch ends
    latest_every_steps: int = 50
    UNPINNED: ClassVar[tuple] = ALL
    CHECKS: ClassVar[tuple] = (
        ("every_epochs", within(1, INT32_MAX), "in [1, 2**31) epochs"),
        ("latest_every_steps", within(0, INT32_MAX), "in [0, 2**31) optimizer steps (0 = only at epoch ends)"),
    )


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
    eval: EvalConfig = MISSING
    seed: int = 0  # initial weights and lane shuffles
    resume: str | None = None  # a run dir or checkpoint dir to continue exactly
    # a run dir or checkpoint dir whose weights a new run starts from (its own data and schedule): lifecycle/init_from
    init_from: str | None = None
    init_optimizer: bool = False  # with init_from: carry its optimizer's moments too (else a fresh optimizer)
    # what the task returns to a sweeper: val/<metric> (val/loss, val/policy, val/accuracy, ...) | best/val_loss
    optimized_metric: str | None = "val/loss"
    UNPINNED: ClassVar[tuple] = ("resume", "optimized_metric")
    # MLX and numpy seed generators take an unsigned 32-bit seed: anything else is a raw TypeError deep inside
    CHECKS: ClassVar[tuple] = (("seed", within(0, 2**32, open_hi=True), "in [0, 2**32)"),)
