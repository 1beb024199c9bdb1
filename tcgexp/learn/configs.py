"""The learning groups' typed schemas (``model``, ``optimizer``, ``scheduler``) and the step paths a run may take.

Hydra composes and checks a run from these before anything is built; they import no MLX, so composing a run
(``tcgexp.app.compose``, ``tcgexp.api``) never loads MLX: tcgexp loads MKL before MLX first binds its BLAS
(``blas.py``), and that is the entry points' work when they run, not an import's. Each class's
implementation lives beside its concept (the modules model, optim and schedule here), named by the options'
``_target_``.
"""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar

from omegaconf import MISSING

from ..schema import FLOAT32_MAX, FLOAT32_TINY, INT32_MAX, schema, within

# trainer.kernels: which step runs (learn/fused_step.py)
KERNELS = ("auto", "fused", "pure")


@schema("model")
class ModelConfig:
    """The recurrent policy (``RecurrentPolicy``); the trainer supplies the feature and action sizes."""

    _target_: str = MISSING
    _partial_: bool = True
    hidden: int = 128  # memory width; compute grows ~quadratically
    memory: bool = True  # false: the same network without memory, reading zeros (the ablation)
    CHECKS: ClassVar[tuple] = (("hidden", within(1, 1_000_000), "in [1, 1e6]"),)


@schema("optimizer")
class OptimizerConfig:
    """An MLX optimizer that owns the schedule the trainer supplies."""

    _target_: str = MISSING
    _partial_: bool = True
    lr: float = 1e-3  # base learning rate; the schedule shapes it; too large and the run stops as diverged
    CHECKS: ClassVar[tuple] = (("lr", within(0.0, FLOAT32_MAX, open_lo=True), "> 0 (and finite in float32)"),)


def _betas(v) -> bool:
    return len(v) == 2 and all(within(0.0, 1.0, open_hi=True)(b) for b in v)


@schema("optimizer", "adamw")
class AdamWConfig(OptimizerConfig):
    weight_decay: float = 0.01  # decoupled, per update, scaled by the learning rate
    # the two moments' decay rates: higher = longer memory of past gradients
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8  # added to the second moment's root: larger = smaller steps where gradients are tiny
    CHECKS: ClassVar[tuple] = OptimizerConfig.CHECKS + (
        ("weight_decay", within(0.0, FLOAT32_MAX), ">= 0 (0 = none)"),
        ("betas", _betas, "two values, each in [0, 1)"),
        ("eps", within(FLOAT32_TINY, 1.0), "in [1.2e-38, 1] (0 would divide by zero where a gradient is zero)"),
    )


@schema("optimizer", "sgd")
class SGDConfig(OptimizerConfig):
    momentum: float = 0.9  # the share of the previous update carried into the next; 0 = plain SGD
    weight_decay: float = 0.0  # L2 penalty added to the gradient (coupled, as mlx.optimizers.SGD applies it)
    nesterov: bool = False  # Nesterov momentum: the gradient looked up ahead of the momentum step
    CHECKS: ClassVar[tuple] = OptimizerConfig.CHECKS + (
        ("weight_decay", within(0.0, FLOAT32_MAX), ">= 0 (0 = none)"),
        ("momentum", within(0.0, 1.0, open_hi=True), "in [0, 1) (0 = plain SGD)"),
    )


@schema("scheduler")
class SchedulerConfig:
    """A learning-rate schedule in optimizer updates (``Schedule``); the trainer supplies the horizon."""

    _target_: str = MISSING
    _partial_: bool = True
    warmup_steps: int = 0  # linear warmup, clamped to the horizon
    total_steps: int = 0  # 0 = this run's real optimizer-step horizon (epochs x optimizer steps per epoch)
    min_lr_ratio: float = 0.0  # the schedule's floor, as a share of optimizer.lr
    reset: bool = False  # on resume: false = keep the checkpoint's schedule (exact continuation); true = start anew
    UNPINNED: ClassVar[tuple] = ("reset",)  # (and, with reset=true, the whole schedule: provenance.pinned)
    CHECKS: ClassVar[tuple] = (
        ("warmup_steps", within(0, INT32_MAX), "in [0, 2**31) optimizer steps"),
        ("total_steps", within(0, INT32_MAX), "in [0, 2**31) optimizer steps (0 = this run's horizon)"),
        ("min_lr_ratio", within(0.0, 1.0), "in [0, 1]"),
    )
