"""Learning-rate schedules counted in optimizer updates (never forward passes or rows).

A schedule is the learning rate's *shape*, a factor in [0, 1] per optimizer
update; ``optimizer.lr`` scales it. The optimizer owns it (mlx-examples' way:
``learning_rate`` is a callable of MLX's own step counter, evaluated inside
the compiled update), so nothing writes the learning rate behind the
stepper's back, and the step count travels in the optimizer's state.

``scheduler.total_steps=0`` means this run's real horizon (epochs x optimizer
steps per epoch, from the plan); warmup is clamped to the horizon. A resumed
run with ``scheduler.reset=false`` keeps its checkpoint's horizon and phase,
and is refused if it would run past that horizon.

Adding a schedule is one subclass (its ``decay``) and one YAML in
``conf/scheduler/``; one with settings of its own takes them as keyword
arguments, keeps each under its own name, and declares them in a schema
beside it (``@schema("scheduler", "<name>")`` subclassing ``SchedulerConfig``).
Its state then saves and resumes with no code of its own: ``state_dict`` is
the class and every constructor setting, ``load_state_dict`` sets them back.
"""

from __future__ import annotations

import inspect
import math

import mlx.core as mx

from .errors import ScheduleError


class Schedule:
    """Linear warmup over ``warmup_steps`` updates, then the subclass's ``decay`` from 1 down to ``min_lr_ratio``.

    Built from the ``scheduler`` group (partial: the trainer supplies ``run_steps``, this run's
    horizon, and for a schedule started mid-run ``start``, the optimizer step it begins at).
    """

    def __init__(
        self, *, run_steps: int, warmup_steps: int, total_steps: int, min_lr_ratio: float, reset: bool, start: int = 0
    ) -> None:
        self.total_steps = int(total_steps or run_steps)  # the horizon, in optimizer updates
        self.warmup_steps = min(int(warmup_steps), self.total_steps)
        self.min_lr_ratio = float(min_lr_ratio)
        self.reset = bool(reset)  # what load_state_dict does with a checkpoint's schedule
        self.start = int(start)

    # the shape, on a Python number (tests, reports) or an MLX array (inside the compiled update)
    def decay(self, progress):
        raise NotImplementedError

    def factor(self, step: int) -> float:
        """The factor of the update with optimizer step `step` (0-based, counted from the run's start)."""
        s = step - self.start
        if self.warmup_steps and s < self.warmup_steps:
            return (s + 1) / self.warmup_steps
        progress = min(1.0, max(0.0, (s - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * self.decay(progress)

    def __call__(self, step: mx.array) -> mx.array:
        """``factor`` on MLX's step counter (a uint64 scalar), in float32."""
        s = step.astype(mx.float32) - self.start
        progress = mx.clip((s - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps), 0.0, 1.0)
        after = self.min_lr_ratio + (1.0 - self.min_lr_ratio) * self.decay(progress)
        if not self.warmup_steps:
            return after
        return mx.where(s < self.warmup_steps, (s + 1) / self.warmup_steps, after)

    def left(self, step: int) -> int:
        """Updates this schedule still has before its horizon, at optimizer step `step`."""
        return self.total_steps - (step - self.start)

    # -- state: every constructor setting, under its own name ---------------------------
    @classmethod
    def settings(cls) -> list[str]:
        """The keyword arguments of every constructor in the class's line (``run_steps``, which
        ``total_steps`` resolves, left out): what a checkpoint records and a resume sets back."""
        names: list[str] = []
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None or klass is object:
                continue
            names += [
                p.name
                for p in inspect.signature(init).parameters.values()
                if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in ("self", "run_steps", *names)
            ]
        return names

    def state_dict(self) -> dict:
        return {
            "_target_": f"{type(self).__module__}.{type(self).__qualname__}",
            **{name: getattr(self, name) for name in self.settings()},
        }

    def load_state_dict(self, saved: dict, *, step: int, remaining_steps: int) -> None:
        """Continue the checkpoint's schedule (its horizon and phase) at optimizer step `step`,
        unless ``reset``: then this schedule, built over the steps the run has left, stays as it is.

        Refuses a run that would pass the checkpoint's horizon, saying how many steps are left.
        """
        if self.reset:
            return
        target = f"{type(self).__module__}.{type(self).__qualname__}"
        if saved.get("_target_") != target:
            raise ScheduleError(
                f"the checkpoint's schedule is {saved.get('_target_')}, this run's {target}: "
                "resume with the checkpoint's scheduler, or pass scheduler.reset=true"
            )
        unknown = sorted(set(saved) - {"_target_", *self.settings()})
        if unknown:
            raise KeyError(f"settings {unknown} are not {type(self).__qualname__}'s")
        for name, value in saved.items():
            if name not in ("_target_", "reset"):  # reset is this run's choice, not the checkpoint's
                setattr(self, name, type(getattr(self, name))(value))
        left = self.left(step)
        if remaining_steps > left:
            raise ScheduleError(
                f"this run needs {remaining_steps} more optimizer steps but the resumed scheduler has only {left} "
                f"of its {self.total_steps}-step horizon left (at step {step - self.start}); lower trainer.epochs so "
                f"at most {left} steps remain, or pass scheduler.reset=true to start a new schedule"
            )


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
