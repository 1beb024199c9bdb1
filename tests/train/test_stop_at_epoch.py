"""``trainer.stop_at_epoch``: a run stopped at an epoch boundary (validated, latest/ written) with the
schedule's horizon at ``trainer.epochs``, then continued in its own run dir, ends bit-identical to a
run straight to the end: what a successive-halving rung and its promotion rely on."""

from __future__ import annotations

import json

import pytest

from tcgexp.errors import ConfigError
from tcgexp.train import train
from tests.conftest import assert_continued
from tests.reliability.test_kill import weights


def test_stopped_at_epoch_1_then_2_then_continued_is_bit_identical_to_straight(train_cfg, tmp_path):
    straight = train(train_cfg("trainer.epochs=3"), run_dir=tmp_path / "straight")
    trial = tmp_path / "trial"  # one run dir throughout, as a promoted trial has
    first = train(train_cfg("trainer.epochs=3", "trainer.stop_at_epoch=1"), run_dir=trial)
    assert first["status"] == "stopped" and len(first["history"]) == 1
    state = json.loads((trial / "checkpoints" / "latest" / "state.json").read_text())
    assert (state["progress"]["epoch"], state["progress"]["position"]) == (1, 0)  # after validation
    assert state["schedule"]["total_steps"] == straight["planned"]["optimizer_steps"]  # the 3-epoch horizon
    second = train(train_cfg("trainer.epochs=3", "trainer.stop_at_epoch=2", f"resume={trial}"), run_dir=trial)
    assert second["status"] == "stopped" and len(second["history"]) == 2
    assert_continued(second, first["processed"]["optimizer_steps"])
    last = train(train_cfg("trainer.epochs=3", f"resume={trial}"), run_dir=trial)
    assert last["status"] == "completed"
    assert_continued(last, second["processed"]["optimizer_steps"])
    assert weights(trial) == weights(tmp_path / "straight")
    assert last["final"] == straight["final"]  # every validation metric, to the bit
    timing = ("rows_per_second", "data_stall_share")
    assert [{**h["val"], **{k: v for k, v in h["train"].items() if k not in timing}} for h in last["history"]] == [
        {**h["val"], **{k: v for k, v in h["train"].items() if k not in timing}} for h in straight["history"]
    ]
    assert last["processed"]["optimizer_steps"] == straight["processed"]["optimizer_steps"]


def test_a_stop_outside_the_run_is_refused_before_any_work(train_cfg, tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.stop_at_epoch=4 is past trainer.epochs=3"):
        train(train_cfg("trainer.epochs=3", "trainer.stop_at_epoch=4"), run_dir=tmp_path / "a")
    assert not (tmp_path / "data").exists()
    train(train_cfg("trainer.epochs=3", "trainer.stop_at_epoch=2"), run_dir=tmp_path / "b")
    with pytest.raises(ConfigError, match=r"trainer.stop_at_epoch=2 but the checkpoint has done 2 epoch"):
        train(
            train_cfg("trainer.epochs=3", "trainer.stop_at_epoch=2", f"resume={tmp_path / 'b'}"), run_dir=tmp_path / "b"
        )


def test_a_resume_already_at_its_max_steps_is_refused_not_run_one_step_more(train_cfg, tmp_path):
    """A run stopped by trainer.max_steps=N, resumed with the same N (its overrides carry it): refused in one
    line saying how to go on, not one more step and a stop."""
    run = tmp_path / "r"
    first = train(train_cfg("trainer.max_steps=3"), run_dir=run)
    assert first["status"] == "stopped" and first["processed"]["optimizer_steps"] == 3
    with pytest.raises(ConfigError, match=r"trainer.max_steps=3 but the checkpoint has done 3 optimizer step"):
        train(train_cfg("trainer.max_steps=3", f"resume={run}"), run_dir=run)
    more = train(train_cfg("trainer.max_steps=5", f"resume={run}"), run_dir=run)
    assert more["status"] == "stopped" and more["processed"]["optimizer_steps"] == 5
