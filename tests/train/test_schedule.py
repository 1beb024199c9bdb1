"""Scheduler rules: optimizer-step horizon, warmup clamp, resume keeps the horizon or refuses."""
from __future__ import annotations

import math

import pytest

from tcgexp.train.schedule import ScheduleError, make_schedule, resume_schedule


def sched(name="cosine", warmup=0, total=0, run=100, min_ratio=0.0):
    return make_schedule(name, base_lr=1.0, warmup_steps=warmup, total_steps=total, min_lr_ratio=min_ratio,
                         run_steps=run)


def test_total_zero_means_this_runs_horizon():
    assert sched(total=0, run=37).total == 37
    assert sched(total=50, run=37).total == 50


def test_warmup_is_clamped_to_the_horizon():
    s = sched(warmup=500, run=40)
    assert s.warmup == 40
    assert [s.lr(i) for i in (0, 19, 39)] == [1 / 40, 20 / 40, 1.0]


@pytest.mark.parametrize("name, end", [("cosine", 0.1), ("linear", 0.1), ("constant", 1.0)])
def test_shapes(name, end):
    s = sched(name, warmup=10, run=110, min_ratio=0.1)
    assert s.lr(9) == pytest.approx(1.0)
    assert s.lr(110) == pytest.approx(end)
    mid = s.lr(60)
    assert {"cosine": 0.55, "linear": 0.55, "constant": 1.0}[name] == pytest.approx(mid)
    assert all(s.lr(i) >= s.lr(i + 1) - 1e-12 for i in range(10, 110))
    assert math.isfinite(s.lr(10_000))


def test_resume_keeps_the_checkpoint_horizon_and_phase():
    s = sched(warmup=5, run=100)
    s.step = 60
    r = resume_schedule(s.state_dict(), remaining_steps=40)
    assert (r.total, r.step, r.lr()) == (100, 60, s.lr(60))


def test_resume_past_the_horizon_is_refused_saying_what_remains():
    s = sched(run=100)
    s.step = 70
    with pytest.raises(ScheduleError, match=r"needs 45 more optimizer steps .* only 30 of its 100-step horizon "
                                            r"left .*at most 30 steps remain.*scheduler.reset=true"):
        resume_schedule(s.state_dict(), remaining_steps=45)


def test_unknown_name_and_negative_values():
    with pytest.raises(ScheduleError, match="scheduler.name"):
        sched("exponential")
    with pytest.raises(ScheduleError):
        sched(warmup=-1)
