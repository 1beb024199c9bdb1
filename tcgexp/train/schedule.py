"""Learning-rate schedules counted in optimizer updates (never forward passes or rows).

A schedule is the learning rate's *shape*, a factor in [0, 1] per optimizer
update; ``optimizer.lr`` scales it. The optimizer owns it (mlx-examples' way:
``learning_rate`` is a callable of MLX's own step counter, evaluated inside
the compiled update), so nothing writes the learning rate behind the
stepper's back, and the step count travels in the optimizer's state.

``scheduler.total_steps=0`` means this run's real horizon (epochs x optimizer
steps per epoch, from the plan); warmup is clamped to the horizon. A resumed
run with ``scheduler.reset=false`` keeps its checkpoint's horizon and phase,
and is refused if it would run past that horizon. Adding a schedule is one
subclass (its ``decay``) and one YAML in ``conf/scheduler/``.
"""
from __future__ import annotations

import math

import mlx.core as mx


class ScheduleError(ValueError):
    pass


class Schedule:
    """Linear warmup over ``warmup`` updates, then the subclass's ``decay`` from 1 down to ``min_lr_ratio``.

    Built from the ``scheduler`` group (partial: the trainer supplies ``run_steps`` and, for a
    schedule started mid-run, ``start``, the optimizer step it begins at).
    """

    def __init__(self, *, run_steps: int, warmup_steps: int, total_steps: int, min_lr_ratio: float,
                 reset: bool = False, start: int = 0) -> None:
        self.total = int(total_steps or run_steps)  # horizon, in optimizer updates
        self.warmup = min(int(warmup_steps), self.total)
        self.min_lr_ratio = float(min_lr_ratio)
        self.reset = bool(reset)  # what a resume does with a checkpoint's schedule (read by the trainer)
        self.start = int(start)

    # the shape, on a Python number (tests, reports) or an MLX array (inside the compiled update)
    def decay(self, progress):
        raise NotImplementedError

    def factor(self, step: int) -> float:
        """The factor of the update with optimizer step `step` (0-based, counted from the run's start)."""
        s = step - self.start
        if self.warmup and s < self.warmup:
            return (s + 1) / self.warmup
        progress = min(1.0, max(0.0, (s - self.warmup) / max(1, self.total - self.warmup)))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * self.decay(progress)

    def __call__(self, step: mx.array) -> mx.array:
        """``factor`` on MLX's step counter (a uint64 scalar), in float32."""
        s = step.astype(mx.float32) - self.start
        progress = mx.clip((s - self.warmup) / max(1, self.total - self.warmup), 0.0, 1.0)
        after = self.min_lr_ratio + (1.0 - self.min_lr_ratio) * self.decay(progress)
        if not self.warmup:
            return after
        return mx.where(s < self.warmup, (s + 1) / self.warmup, after)

    def left(self, step: int) -> int:
        """Updates this schedule still has before its horizon, at optimizer step `step`."""
        return self.total - (step - self.start)

    def state_dict(self) -> dict:
        return {"_target_": f"{type(self).__module__}.{type(self).__qualname__}", "total_steps": self.total,
                "warmup_steps": self.warmup, "min_lr_ratio": self.min_lr_ratio, "start": self.start}


class Cosine(Schedule):
    def decay(self, progress):
        cos = mx.cos if isinstance(progress, mx.array) else math.cos
        return 0.5 * (1.0 + cos(math.pi * progress))


class Linear(Schedule):
    def decay(self, progress):
        return 1.0 - progress


class Constant(Schedule):
    def decay(self, progress):
        return 1.0 + 0.0 * progress


def resume_schedule(saved: dict, *, step: int, remaining_steps: int) -> Schedule:
    """The checkpoint's schedule (its class and horizon), continued at optimizer step `step`.

    Refuses a run that would pass the horizon, saying how many steps are left.
    """
    from hydra.utils import get_class

    params = {k: v for k, v in saved.items() if k != "_target_"}
    sched: Schedule = get_class(saved["_target_"])(run_steps=params.pop("total_steps"), total_steps=0, **params)
    left = sched.left(step)
    if remaining_steps > left:
        raise ScheduleError(
            f"this run needs {remaining_steps} more optimizer steps but the resumed scheduler has only {left} "
            f"of its {sched.total}-step horizon left (at step {step - sched.start}); lower trainer.epochs so at "
            f"most {left} steps remain, or pass scheduler.reset=true to start a new schedule")
    return sched
