"""The days a run trains on are recorded (result.json, checkpoint) and a resume on other days is refused."""

from __future__ import annotations

import json

import pytest

from tcgexp.lifecycle.checkpoint import CheckpointError
from tcgexp.train import train


def test_selected_days_recorded_and_resume_on_other_days_refused(train_cfg, tmp_path):
    first = train(train_cfg("dataset.days=2", "trainer.max_steps=2"), run_dir=tmp_path / "a")
    days = first["dates"]
    assert len(days) == 2
    state = json.loads((tmp_path / "a" / "checkpoints" / "latest" / "state.json").read_text())
    assert state["provenance"]["dates"] == days
    with pytest.raises(CheckpointError) as err:
        train(train_cfg(f"dataset.dates=[{days[0]}]", f"resume={tmp_path / 'a'}"), run_dir=tmp_path / "b")
    assert f"trained on but not selected now: {days[1]}" in str(err.value)
    again = train(train_cfg(f"dataset.dates=[{days[0]},{days[1]}]", f"resume={tmp_path / 'a'}"), run_dir=tmp_path / "c")
    assert again["dates"] == days and again["processed"]["optimizer_steps"] == again["planned"]["optimizer_steps"]
