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

import mlx.core as mx
import mlx.optimizers as optim


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
