"""MLX optimizers that own the run's learning-rate schedule.

Built from the ``optimizer`` group (partial: the trainer supplies the
schedule): ``learning_rate`` becomes ``lr x schedule(step)`` on MLX's own step
counter, evaluated inside the compiled update. The optimizer's state (moments,
step counter) is MLX's own tree, saved and restored whole by the checkpoint.
Adding an optimizer is one subclass taking the schedule, its schema beside it
(``@schema("optimizer", "<name>")`` subclassing ``OptimizerConfig``) and one
YAML in ``conf/optimizer/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import ClassVar

import mlx.core as mx
import mlx.optimizers as optim
from omegaconf import MISSING

from ..schema import FLOAT32_MAX, FLOAT32_TINY, schema, within


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


def scaled(lr: float, schedule: Callable[[mx.array], mx.array]) -> Callable[[mx.array], mx.array]:
    """``learning_rate`` of an optimizer that owns `schedule`: ``lr x schedule(step)``."""
    return lambda step: lr * schedule(step)


class AdamW(optim.AdamW):
    def __init__(
        self,
        schedule: Callable[[mx.array], mx.array],
        *,
        lr: float,
        weight_decay: float,
        betas: list[float],
        eps: float,
    ) -> None:
        super().__init__(learning_rate=scaled(lr, schedule), betas=list(betas), eps=eps, weight_decay=weight_decay)


class SGD(optim.SGD):
    def __init__(
        self,
        schedule: Callable[[mx.array], mx.array],
        *,
        lr: float,
        momentum: float,
        weight_decay: float,
        nesterov: bool,
    ) -> None:
        super().__init__(
            learning_rate=scaled(lr, schedule), momentum=momentum, weight_decay=weight_decay, nesterov=nesterov
        )
