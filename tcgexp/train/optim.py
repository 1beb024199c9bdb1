"""MLX optimizers that own the run's learning-rate schedule and its clipping norm.

Built from the ``optimizer`` group (partial: the trainer supplies the
schedule): ``learning_rate`` becomes ``lr x schedule(step)`` on MLX's own step
counter, evaluated inside the compiled update, and ``grad_clip`` (global norm,
0 = off) is what the stepper clips to. Adding an optimizer is one subclass and
one YAML in ``conf/optimizer/``.
"""
from __future__ import annotations

from typing import Callable

import mlx.core as mx
import mlx.optimizers as optim


def _scaled(lr: float, schedule: Callable[[mx.array], mx.array]) -> Callable[[mx.array], mx.array]:
    return lambda step: lr * schedule(step)


class AdamW(optim.AdamW):
    def __init__(self, schedule: Callable[[mx.array], mx.array], *, lr: float, grad_clip: float,
                 weight_decay: float, betas: list[float], eps: float) -> None:
        super().__init__(learning_rate=_scaled(lr, schedule), betas=list(betas), eps=eps, weight_decay=weight_decay)
        self.lr, self.grad_clip, self.schedule = lr, grad_clip, schedule


class SGD(optim.SGD):
    def __init__(self, schedule: Callable[[mx.array], mx.array], *, lr: float, grad_clip: float,
                 momentum: float, weight_decay: float, nesterov: bool) -> None:
        super().__init__(learning_rate=_scaled(lr, schedule), momentum=momentum, weight_decay=weight_decay,
                         nesterov=nesterov)
        self.lr, self.grad_clip, self.schedule = lr, grad_clip, schedule
