"""Scheduler rules: optimizer-step horizon, warmup clamp, resume keeps the horizon or refuses; MLX = Python;
a schedule's state is its class and constructor settings, saved and set back with no code of its own."""

from __future__ import annotations

import math

import mlx.core as mx
import pytest

from tcgexp.app import option
from tcgexp.config import build
from tcgexp.learn.errors import ScheduleError


def sched(name="cosine", warmup=0, total=0, run=100, min_ratio=0.0, start=0, *more):
    node = option(
        "scheduler",
        name,
        f"scheduler.warmup_steps={warmup}",
        f"scheduler.total_steps={total}",
        f"scheduler.min_lr_ratio={min_ratio}",
        *more,
    )
    return build(node)(run_steps=run, start=start)


def resumed(saved: dict, *, step: int, remaining_steps: int):
    """What a resume does: a schedule built over what the run has left, set back to the checkpoint's."""
    s = sched("cosine", 0, 0, remaining_steps, 0.0, step)
    s.load_state_dict(saved, step=step, remaining_steps=remaining_steps)
    return s


def test_total_zero_means_this_runs_horizon():
    assert sched(total=0, run=37).total_steps == 37
    assert sched(total=50, run=37).total_steps == 50


def test_warmup_is_clamped_to_the_horizon():
    s = sched(warmup=500, run=40)
    assert s.warmup_steps == 40
    assert [s.factor(i) for i in (0, 19, 39)] == [1 / 40, 20 / 40, 1.0]


@pytest.mark.parametrize("name, end", [("cosine", 0.1), ("linear", 0.1), ("constant", 1.0)])
def test_shapes(name, end):
    s = sched(name, warmup=10, run=110, min_ratio=0.1)
    assert s.factor(9) == pytest.approx(1.0)
    assert s.factor(110) == pytest.approx(end)
    mid = s.factor(60)
    assert {"cosine": 0.55, "linear": 0.55, "constant": 1.0}[name] == pytest.approx(mid)
    assert all(s.factor(i) >= s.factor(i + 1) - 1e-12 for i in range(10, 110))
    assert math.isfinite(s.factor(10_000))


@pytest.mark.parametrize("name", ["cosine", "linear", "constant"])
def test_the_optimizer_sees_what_the_python_schedule_says(name):
    """The optimizer evaluates the schedule on MLX's step counter (uint64), in float32."""
    s = sched(name, warmup=7, run=50, min_ratio=0.2, start=3)
    for step in range(0, 70, 3):
        got = float(s(mx.array(step, dtype=mx.uint64)))
        assert got == pytest.approx(s.factor(step), rel=1e-6, abs=1e-7), step


def test_resume_keeps_the_checkpoint_horizon_and_phase():
    s = sched(warmup=5, run=100, min_ratio=0.1)
    r = resumed(s.state_dict(), step=60, remaining_steps=40)
    assert (type(r), r.total_steps, r.left(60), r.factor(60)) == (type(s), 100, 40, s.factor(60))
    assert r.state_dict() == s.state_dict()
    assert [float(r(mx.array(k, dtype=mx.uint64))) for k in range(60, 100)] == [
        float(s(mx.array(k, dtype=mx.uint64))) for k in range(60, 100)
    ]


def test_state_is_every_constructor_setting():
    s = sched("linear", 7, 90, 50, 0.25, 3)
    assert s.state_dict() == {
        "_target_": "tcgexp.learn.schedule.Linear",
        "warmup_steps": 7,
        "total_steps": 90,
        "min_lr_ratio": 0.25,
        "reset": False,
        "start": 3,
    }


def test_a_checkpoint_of_before_reset_was_a_setting_still_resumes():
    old = {
        "_target_": "tcgexp.learn.schedule.Cosine",
        "total_steps": 100,
        "warmup_steps": 5,
        "min_lr_ratio": 0.0,
        "start": 0,
    }
    assert resumed(old, step=60, remaining_steps=40).factor(60) == sched(warmup=5, run=100).factor(60)


def test_reset_keeps_the_new_schedule():
    s = sched(warmup=5, run=100)
    r = sched("linear", 0, 0, 30, 0.0, 70, "scheduler.reset=true")
    r.load_state_dict(s.state_dict(), step=70, remaining_steps=30)
    assert (type(r).__name__, r.total_steps, r.start) == ("Linear", 30, 70)


def test_resume_past_the_horizon_is_refused_saying_what_remains():
    s = sched(run=100)
    with pytest.raises(
        ScheduleError,
        match=r"needs 45 more optimizer steps .* only 30 of its 100-step horizon "
        r"left .*at most 30 steps remain.*scheduler.reset=true",
    ):
        resumed(s.state_dict(), step=70, remaining_steps=45)
