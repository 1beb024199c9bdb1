"""A resume never silently changes the run: a new schedule is refused unless asked for, then recorded as run."""

from __future__ import annotations

import json

import pytest

from tcgexp.lifecycle.checkpoint import CheckpointError
from tcgexp.train import train
from tests.conftest import assert_continued, compose_config
from tests.train.conftest import TINY_TRAIN


def cfg(root, *more):
    return compose_config(f"dataset.root={root}", *TINY_TRAIN, "trainer.epochs=1", *more)


def test_a_schedule_change_on_resume_is_refused_by_name_and_runs_with_reset(tmp_path):
    train(cfg(tmp_path / "data", "trainer.max_steps=3"), run_dir=tmp_path / "a")  # cosine, the default
    with pytest.raises(CheckpointError) as err:
        train(cfg(tmp_path / "data", "scheduler=constant", f"resume={tmp_path / 'a'}"), run_dir=tmp_path / "b")
    msg = str(err.value)
    assert "scheduler._target_" in msg and "Constant" in msg and "scheduler.reset=true" in msg
    assert not (tmp_path / "b" / "checkpoints").exists()

    result = train(
        cfg(tmp_path / "data", "scheduler=constant", "scheduler.reset=true", f"resume={tmp_path / 'a'}"),
        run_dir=tmp_path / "c",
    )
    assert result["status"] == "completed"
    assert_continued(result, 3)
    state = json.loads((tmp_path / "c" / "checkpoints" / "latest" / "state.json").read_text())
    assert state["schedule"]["_target_"].endswith("Constant"), "the schedule that ran is the one recorded"
    assert state["config"]["scheduler"]["_target_"].endswith("Constant")
    assert state["schedule"]["start"] == 3, "the new schedule starts at the optimizer step it resumed from"


def test_a_checkpoint_written_before_grad_clip_moved_to_the_trainer_resumes(tmp_path):
    """Checkpoints of before the trainer was a class kept ``optimizer.grad_clip`` (config and overrides)."""
    from tcgexp.lifecycle import checkpoint as ckpt
    from tcgexp.lifecycle.resume import resume_config

    args = [
        f"dataset.root={tmp_path / 'data'}",
        *TINY_TRAIN,
        "trainer.epochs=1",
        "trainer.grad_clip=0.5",
        "trainer.max_steps=3",
    ]
    train(compose_config(*args), run_dir=tmp_path / "a", overrides=args)
    latest = tmp_path / "a" / "checkpoints" / "latest"
    state = json.loads((latest / "state.json").read_text())
    state["config"]["optimizer"]["grad_clip"] = state["config"]["trainer"].pop("grad_clip")
    del state["config"]["trainer"]["_target_"]
    state["overrides"] = [a.replace("trainer.grad_clip", "optimizer.grad_clip") for a in args]
    (latest / "state.json").write_text(json.dumps(state))
    ckpt.seal(latest)
    new, overrides = resume_config(
        cfg(tmp_path / "data", f"resume={tmp_path / 'a'}"), ["trainer.max_steps=0"], compose_config
    )
    assert new.trainer.grad_clip == 0.5 and "trainer.grad_clip=0.5" in overrides
    done = train(new, run_dir=tmp_path / "b")
    assert done["status"] == "completed"
    assert_continued(done, 3)
