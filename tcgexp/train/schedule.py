"""Learning-rate schedules counted in optimizer updates (never forward passes or rows).

``scheduler.total_steps=0`` means this run's real horizon (epochs x optimizer
steps per epoch, from the plan); warmup is clamped to the horizon. A resumed
run with ``scheduler.reset=false`` keeps its checkpoint's horizon and phase,
and is refused if it would run past that horizon.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

NAMES = ("cosine", "linear", "constant")


class ScheduleError(ValueError):
    pass


@dataclass
class Schedule:
    name: str
    base_lr: float
    total: int  # horizon, in optimizer updates
    warmup: int
    min_lr_ratio: float = 0.0
    step: int = 0  # updates applied so far under this schedule

    def lr(self, step: int | None = None) -> float:
        """Learning rate for the update with index `step` (default: the next one)."""
        s = self.step if step is None else step
        if self.warmup and s < self.warmup:
            return self.base_lr * (s + 1) / self.warmup
        if self.name == "constant":
            return self.base_lr
        span = max(1, self.total - self.warmup)
        progress = min(1.0, (s - self.warmup) / span)
        if self.name == "cosine":
            factor = 0.5 * (1.0 + math.cos(math.pi * progress))
        else:  # linear
            factor = 1.0 - progress
        return self.base_lr * (self.min_lr_ratio + (1.0 - self.min_lr_ratio) * factor)

    def state_dict(self) -> dict:
        return asdict(self)


def make_schedule(name: str, *, base_lr: float, warmup_steps: int, total_steps: int, min_lr_ratio: float,
                  run_steps: int) -> Schedule:
    """A fresh schedule for a run that will apply `run_steps` optimizer updates."""
    if name not in NAMES:
        raise ScheduleError(f"scheduler.name={name!r} is not one of {NAMES}")
    if warmup_steps < 0 or total_steps < 0:
        raise ScheduleError("scheduler.warmup_steps and scheduler.total_steps must be >= 0")
    total = total_steps or run_steps
    return Schedule(name, base_lr, total, min(warmup_steps, total), min_lr_ratio)


def resume_schedule(saved: dict, *, remaining_steps: int) -> Schedule:
    """The checkpoint's schedule, continued; refuse a run that would pass its horizon."""
    sched = Schedule(**saved)
    left = sched.total - sched.step
    if remaining_steps > left:
        raise ScheduleError(
            f"this run needs {remaining_steps} more optimizer steps but the resumed scheduler has only {left} "
            f"of its {sched.total}-step horizon left (at step {sched.step}); lower trainer.epochs so at most "
            f"{left} steps remain, or pass scheduler.reset=true to start a new schedule")
    return sched
