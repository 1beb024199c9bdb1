"""Scheduler rules: optimizer-step horizon, warmup clamp, resume keeps the horizon or refuses; MLX = Python."""
from __future__ import annotations

import math

import mlx.core as mx
import pytest

from tcgexp.config import build, option
from tcgexp.train.schedule import ScheduleError, resume_schedule


def sched(name="cosine", warmup=0, total=0, run=100, min_ratio=0.0, start=0):
    node = option("scheduler", name, f"scheduler.warmup_steps={warmup}", f"scheduler.total_steps={total}",
                  f"scheduler.min_lr_ratio={min_ratio}")
    return build(node)(run_steps=run, start=start)


def test_total_zero_means_this_runs_horizon():
    assert sched(total=0, run=37).total == 37
    assert sched(total=50, run=37).total == 50


def test_warmup_is_clamped_to_the_horizon():
    s = sched(warmup=500, run=40)
    assert s.warmup == 40
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
    s = sched(warmup=5, run=100)
    r = resume_schedule(s.state_dict(), step=60, remaining_steps=40)
    assert (type(r), r.total, r.left(60), r.factor(60)) == (type(s), 100, 40, s.factor(60))


def test_resume_past_the_horizon_is_refused_saying_what_remains():
    s = sched(run=100)
    with pytest.raises(ScheduleError, match=r"needs 45 more optimizer steps .* only 30 of its 100-step horizon "
                                            r"left .*at most 30 steps remain.*scheduler.reset=true"):
        resume_schedule(s.state_dict(), step=70, remaining_steps=45)
